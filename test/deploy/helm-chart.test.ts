/**
 * The Helm chart (issue 29 item 3): rendered by a real `helm template` for the
 * default values and the two runner layouts, every object checked against the
 * Kubernetes API schemas (k8s.ts), and what matters about it checked here:
 * probes on the ops port, a PDB and a CPU HPA per Deployment, non-root
 * containers, secrets only by reference, the runner DaemonSets' identities and
 * capabilities, and a 3-node JetStream cluster whose rendered config
 * nats-server accepts with Paddock's users included.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse } from "yaml";
import { natsAuthConfig, natsServerBinary, passwordVariable, runnerUser } from "@paddock/testing";
import { byKind, chartDir, lintChart, renderChart, validateAgainstSchemas, type K8sObject } from "./k8s.ts";

type EnvVar = { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string }; fieldRef?: unknown } };
type Probe = { httpGet?: { path: string; port: string | number } };
type Container = {
  name: string;
  env?: EnvVar[];
  ports?: { name?: string; containerPort: number }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  securityContext?: { runAsUser?: number; runAsNonRoot?: boolean; privileged?: boolean; procMount?: string; allowPrivilegeEscalation?: boolean; readOnlyRootFilesystem?: boolean; capabilities?: { add?: string[]; drop?: string[] } };
};
type PodSpec = { containers: Container[]; hostUsers?: boolean; securityContext?: { runAsUser?: number; runAsNonRoot?: boolean }; nodeSelector?: Record<string, string> };
type Workload = K8sObject & { spec: { replicas?: number; selector: { matchLabels: Record<string, string> }; template: { metadata: { labels: Record<string, string> }; spec: PodSpec } } };

const LAYOUTS = { default: [], daemonset: ["ci/runners-daemonset.yaml"], external: ["ci/runners-external.yaml"] } as const;
type Layout = keyof typeof LAYOUTS;
const rendered = {} as Record<Layout, K8sObject[]>;
const RUNNER_CAPS = ["SETUID", "SETGID", "SYS_ADMIN", "NET_ADMIN", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL"];
const DAEMONSET_RUNNERS = parse(readFileSync(join(chartDir, "ci", "runners-daemonset.yaml"), "utf8")) as { runners: { pool: string; nodes: { node: string; id: string; existingSecret?: string }[] } };

const workloads = (objs: K8sObject[], kind: string) => byKind(objs, kind) as Workload[];
const envOf = (c: Container, name: string) => c.env?.find((e) => e.name === name);
const matches = (selector: Record<string, string>, labels: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v);
const paddockWorkloads = (objs: K8sObject[]) => [...workloads(objs, "Deployment"), ...workloads(objs, "DaemonSet")].filter((w) => w.metadata.labels?.["app.kubernetes.io/name"] === "paddock");

beforeAll(() => {
  for (const layout of Object.keys(LAYOUTS) as Layout[]) rendered[layout] = renderChart([...LAYOUTS[layout]]);
});

describe.each(Object.keys(LAYOUTS) as Layout[])("the chart rendered with the %s values", (layout) => {
  it("validates every object against the Kubernetes API schemas, with no kind left unchecked", async () => {
    const objects = rendered[layout];
    expect(objects.length).toBeGreaterThan(10);
    const report = await validateAgainstSchemas(objects);
    expect(report.unknownKinds).toEqual([]);
    expect(report.invalid).toEqual([]);
  });

  it("passes helm lint --strict", () => {
    expect(lintChart([...LAYOUTS[layout]])).toBe("");
  });

  it("probes every Paddock container on its ops port: ready at /readyz, alive at /healthz", () => {
    for (const w of paddockWorkloads(rendered[layout])) {
      for (const c of w.spec.template.spec.containers) {
        const opsPort = Number(envOf(c, "PADDOCK_OPS_PORT")?.value);
        expect(c.ports?.find((p) => p.name === "ops")?.containerPort, w.metadata.name).toBe(opsPort);
        expect(envOf(c, "PADDOCK_OPS_HOST")?.value).toBe("0.0.0.0");
        expect(c.readinessProbe?.httpGet).toEqual({ path: "/readyz", port: "ops" });
        expect(c.livenessProbe?.httpGet).toEqual({ path: "/healthz", port: "ops" });
      }
    }
  });

  it("gives every Deployment a PodDisruptionBudget and a HorizontalPodAutoscaler on CPU", () => {
    const objs = rendered[layout];
    const deployments = workloads(objs, "Deployment");
    expect(deployments.map((d) => d.metadata.labels?.["app.kubernetes.io/component"]).sort()).toEqual(["event-recorder", "gateway", "scheduler"]);
    for (const d of deployments) {
      const labels = d.spec.template.metadata.labels;
      expect(matches(d.spec.selector.matchLabels, labels)).toBe(true);
      const pdbs = byKind(objs, "PodDisruptionBudget").filter((p) => matches((p as Workload).spec.selector.matchLabels, labels));
      expect(pdbs, d.metadata.name).toHaveLength(1);
      const hpas = byKind(objs, "HorizontalPodAutoscaler") as (K8sObject & { spec: { scaleTargetRef: { kind: string; name: string }; minReplicas: number; metrics: { type: string; resource?: { name: string; target: { type: string } } }[] } })[];
      const hpa = hpas.find((h) => h.spec.scaleTargetRef.kind === "Deployment" && h.spec.scaleTargetRef.name === d.metadata.name);
      expect(hpa, d.metadata.name).toBeDefined();
      expect(hpa?.spec.metrics).toContainEqual(expect.objectContaining({ type: "Resource", resource: { name: "cpu", target: expect.objectContaining({ type: "Utilization" }) } }));
      // The HPA owns the replica count; a fixed one would be reset on every upgrade.
      expect(d.spec.replicas).toBeUndefined();
      expect(hpa?.spec.minReplicas).toBeGreaterThanOrEqual(2);
    }
  });

  it("runs the control plane and NATS as non-root on read-only root filesystems with no capabilities", () => {
    const objs = rendered[layout];
    for (const w of [...workloads(objs, "Deployment"), ...workloads(objs, "StatefulSet")]) {
      const pod = w.spec.template.spec;
      for (const c of pod.containers) {
        const sc = c.securityContext;
        const runAsUser = sc?.runAsUser ?? pod.securityContext?.runAsUser;
        expect(sc?.runAsNonRoot ?? pod.securityContext?.runAsNonRoot, `${w.metadata.name}/${c.name}`).toBe(true);
        expect(runAsUser === undefined || runAsUser > 0).toBe(true);
        expect(sc?.allowPrivilegeEscalation).toBe(false);
        expect(sc?.readOnlyRootFilesystem).toBe(true);
        expect(sc?.capabilities?.drop).toEqual(["ALL"]);
        expect(sc?.capabilities?.add).toBeUndefined();
      }
    }
  });

  it("renders no Secret and takes every secret setting by reference", () => {
    const objs = rendered[layout];
    expect(byKind(objs, "Secret")).toEqual([]);
    const secretish = /PASS|SECRET|TOKEN|KEY/;
    for (const w of [...workloads(objs, "Deployment"), ...workloads(objs, "DaemonSet"), ...workloads(objs, "StatefulSet")]) {
      for (const c of w.spec.template.spec.containers) {
        for (const e of (c.env ?? []).filter((v) => secretish.test(v.name))) {
          expect(e.value, `${w.metadata.name}/${c.name} ${e.name}`).toBeUndefined();
          expect(e.valueFrom?.secretKeyRef?.name).toMatch(/\S/);
        }
      }
    }
  });

  it("runs NATS from the official chart: a 3-replica JetStream StatefulSet every service points at", () => {
    const objs = rendered[layout];
    const sts = workloads(objs, "StatefulSet").filter((s) => s.metadata.labels?.["app.kubernetes.io/name"] === "nats");
    expect(sts).toHaveLength(1);
    const nats = sts[0] as Workload & { spec: { volumeClaimTemplates?: { spec: { resources: { requests: { storage: string } } } }[] } };
    expect(nats.spec.replicas).toBe(3);
    expect(nats.spec.volumeClaimTemplates?.[0]?.spec.resources.requests.storage).toBe("10Gi");
    const conf = natsConf(objs);
    expect(conf).toMatch(/"jetstream": \{[^}]*"store_dir": "\/data"/);
    expect(conf.match(/nats:\/\/paddock-nats-\d\.paddock-nats-headless:6222/g)).toHaveLength(3);
    const clientService = byKind(objs, "Service").find((s) => s.metadata.name === "paddock-nats");
    expect(clientService).toBeDefined();
    for (const w of paddockWorkloads(objs)) {
      for (const c of w.spec.template.spec.containers) {
        expect(envOf(c, "PADDOCK_NATS_URL")?.value).toBe("nats://paddock-nats:4222");
        expect(envOf(c, "PADDOCK_REPLICAS")?.value).toBe("3");
      }
    }
  });
});

describe("the schema check itself", () => {
  it("reports an object that breaks its schema and a kind it has no schema for", async () => {
    const deployment = rendered.default.find((o) => o.kind === "Deployment") as Workload;
    const broken = structuredClone(deployment);
    const container = broken.spec.template.spec.containers[0] as unknown as Record<string, unknown>;
    container.readinessProbe = { httpGet: { path: "/readyz", port: { named: "ops" } }, periodSeconds: "often" };
    const crd = { apiVersion: "monitoring.coreos.com/v1", kind: "PodMonitor", metadata: { name: "m" } };
    const report = await validateAgainstSchemas([deployment, broken, crd]);
    expect(report.invalid).toHaveLength(1);
    expect(report.invalid[0]).toMatch(/readinessProbe/);
    expect(report.unknownKinds).toEqual(["monitoring.coreos.com/v1 PodMonitor m"]);
  });
});

/** The rendered nats.conf (the subchart's ConfigMap). */
function natsConf(objs: K8sObject[]): string {
  const cm = byKind(objs, "ConfigMap").find((o) => o.metadata.name === "paddock-nats-config") as (K8sObject & { data: Record<string, string> }) | undefined;
  return cm?.data["nats.conf"] ?? "";
}

function natsContainer(objs: K8sObject[]): Container {
  const sts = workloads(objs, "StatefulSet").find((s) => s.metadata.labels?.["app.kubernetes.io/name"] === "nats");
  const c = sts?.spec.template.spec.containers.find((x) => x.name === "nats");
  if (c === undefined) throw new Error("no nats container rendered");
  return c;
}

describe("NATS's configuration with Paddock's users", () => {
  let dir = "";
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "paddock-chart-nats-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("is accepted by nats-server, auth.conf included as the chart mounts it, every password it names given to the NATS pods", () => {
    const objs = rendered.daemonset;
    const { pool, nodes } = DAEMONSET_RUNNERS.runners;
    // What an operator puts in the Secret paddock-nats-auth (deploy/README.md): natsAuthConfig for the declared runners.
    const auth = natsAuthConfig({ runners: nodes.map((n) => ({ poolId: pool, runnerId: n.id })), passwords: {}, passwordVariables: true });
    const variables = [...auth.matchAll(/password: \$([A-Z0-9_]+)/g)].map((m) => m[1] ?? "");
    const given = (natsContainer(objs).env ?? []).filter((e) => e.valueFrom?.secretKeyRef !== undefined).map((e) => e.name);
    expect(given.sort()).toEqual([...variables].sort());
    // The layout in the pod: the ConfigMap at /etc/nats-config, the auth Secret at /etc/paddock-nats.
    mkdirSync(join(dir, "nats-config"), { recursive: true });
    mkdirSync(join(dir, "paddock-nats"), { recursive: true });
    writeFileSync(join(dir, "nats-config", "nats.conf"), natsConf(objs));
    writeFileSync(join(dir, "paddock-nats", "auth.conf"), auth);
    const env = { ...process.env, SERVER_NAME: "paddock-nats-0", ...Object.fromEntries(variables.map((v) => [v, "example-password"])) };
    const r = spawnSync(natsServerBinary(), ["-c", join(dir, "nats-config", "nats.conf"), "-t"], { encoding: "utf8", env });
    expect(r.stdout + r.stderr).toContain("is valid");
    expect(r.status).toBe(0);
  });
});

describe("runners", () => {
  it("as DaemonSets: one per declared node, on the labelled node, as that runner's own NATS user", () => {
    const { pool, nodes } = DAEMONSET_RUNNERS.runners;
    const sets = workloads(rendered.daemonset, "DaemonSet");
    expect(sets).toHaveLength(nodes.length);
    for (const n of nodes) {
      const ds = sets.find((s) => s.metadata.labels?.["paddock.dev/runner-id"] === n.id);
      expect(ds, n.id).toBeDefined();
      const pod = ds?.spec.template.spec;
      expect(pod?.nodeSelector).toEqual({ "paddock.dev/runner": "true", "kubernetes.io/hostname": n.node });
      const c = pod?.containers[0];
      if (c === undefined) throw new Error(`no runner container for ${n.id}`);
      const user = runnerUser(pool, n.id);
      expect(envOf(c, "PADDOCK_NATS_USER")?.value).toBe(user);
      expect(envOf(c, "PADDOCK_RUNNER_ID")?.value).toBe(n.id);
      expect(envOf(c, "PADDOCK_POOL_ID")?.value).toBe(pool);
      expect(envOf(c, "PADDOCK_SANDBOX")?.value).toBe("bwrap");
      const secret = n.existingSecret ?? `paddock-runner-${n.id}`;
      expect(envOf(c, "PADDOCK_NATS_PASS")?.valueFrom?.secretKeyRef).toEqual({ name: secret, key: passwordVariable(user) });
      // Its own Secret only: no runner reads the control plane's secrets or another runner's.
      const secretsRead = new Set((c.env ?? []).flatMap((e) => (e.valueFrom?.secretKeyRef ? [e.valueFrom.secretKeyRef.name] : [])));
      expect([...secretsRead]).toEqual([secret]);
    }
  });

  it("as DaemonSets: not privileged, in a user namespace of their own, exactly the capabilities the bwrap sandbox needs", () => {
    for (const ds of workloads(rendered.daemonset, "DaemonSet")) {
      const pod = ds.spec.template.spec;
      const c = pod.containers[0];
      const sc = c?.securityContext;
      expect(sc?.privileged).toBe(false);
      // uid 0 of the pod is an unprivileged uid on the node; the unmasked /proc bwrap needs is admitted only so.
      expect(pod.hostUsers).toBe(false);
      expect(sc?.procMount).toBe("Unmasked");
      // Session uids must fit the 65536 ids the pod's namespace maps (the default count is 1024).
      const first = Number(c === undefined ? NaN : envOf(c, "PADDOCK_SANDBOX_UID_FIRST")?.value);
      expect(first + 1024).toBeLessThan(65_534);
      expect(first).toBeGreaterThan(10_001);
      expect(sc?.readOnlyRootFilesystem).toBe(true);
      expect(sc?.capabilities?.drop).toEqual(["ALL"]);
      expect([...(sc?.capabilities?.add ?? [])].sort()).toEqual([...RUNNER_CAPS].sort());
    }
    // The same list docs/sandbox.md gives for a runner of its own user.
    const documented = /`(CAP_SETUID[^`]+)`/.exec(readFileSync(join(chartDir, "..", "..", "..", "docs", "sandbox.md"), "utf8").replace(/\n/g, " "))?.[1] ?? "";
    expect(documented.split(/\s+/).map((c) => c.replace(/^CAP_/, "")).sort()).toEqual([...RUNNER_CAPS].sort());
  });

  it("outside the cluster: no runner pods, NATS and the gateway published through load balancers, NATS with TLS", () => {
    const objs = rendered.external;
    expect(workloads(objs, "DaemonSet")).toEqual([]);
    const services = byKind(objs, "Service") as (K8sObject & { spec: { type?: string } })[];
    expect(services.find((s) => s.metadata.name === "paddock-nats")?.spec.type).toBe("LoadBalancer");
    expect(services.find((s) => s.metadata.name === "paddock-gateway")?.spec.type).toBe("LoadBalancer");
    expect(natsConf(objs)).toMatch(/"tls": \{[^}]*"cert_file": "\/etc\/nats-certs\/nats\/tls\.crt"/);
  });

  it("the default values run no runner in the cluster", () => {
    expect(workloads(rendered.default, "DaemonSet")).toEqual([]);
  });
});

describe("the NATS subchart", () => {
  it("is the official chart, vendored with its license, at the version Chart.yaml depends on", () => {
    const chart = parse(readFileSync(join(chartDir, "Chart.yaml"), "utf8")) as { dependencies: { name: string; version: string; repository: string }[] };
    const sub = parse(readFileSync(join(chartDir, "charts", "nats", "Chart.yaml"), "utf8")) as { name: string; version: string };
    expect(chart.dependencies).toEqual([{ name: "nats", version: sub.version, repository: "https://nats-io.github.io/k8s/helm/charts/", condition: "nats.enabled" }]);
    expect(sub.name).toBe("nats");
    expect(readFileSync(join(chartDir, "charts", "nats", "LICENSE"), "utf8")).toContain("Apache License");
    expect(existsSync(join(chartDir, "charts", "nats", "templates", "stateful-set.yaml"))).toBe(true);
  });
});
