{{/* The release's prefix for every object this chart (not the NATS subchart) makes. */}}
{{- define "paddock.fullname" -}}
{{- if contains "paddock" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-paddock" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "paddock.labels" -}}
app.kubernetes.io/name: paddock
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "gateway"). */}}
{{- define "paddock.selector" -}}
app.kubernetes.io/name: paddock
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A service's image: (dict "root" $ "service" "gateway"). */}}
{{- define "paddock.image" -}}
{{- $i := .root.Values.image -}}
{{- $repo := printf "%s-%s" $i.repository .service -}}
{{- if $i.registry }}{{ $repo = printf "%s/%s" $i.registry $repo }}{{ end -}}
{{- printf "%s:%s" $repo (default .root.Chart.AppVersion $i.tag) -}}
{{- end -}}

{{/* The NATS client Service of the subchart (its nats.fullname), unless natsAuth.url names another. */}}
{{- define "paddock.natsUrl" -}}
{{- if .Values.natsAuth.url -}}
{{- .Values.natsAuth.url -}}
{{- else -}}
{{- $name := "nats" -}}
{{- if contains $name .Release.Name -}}
{{- printf "nats://%s:4222" (.Release.Name | trunc 63 | trimSuffix "-") -}}
{{- else -}}
{{- printf "nats://%s-%s:4222" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The environment every service shares: NATS, replicas, logging, ops endpoints. */}}
{{- define "paddock.commonEnv" -}}
- name: PADDOCK_NATS_URL
  value: {{ include "paddock.natsUrl" . | quote }}
- name: PADDOCK_REPLICAS
  value: {{ .Values.natsAuth.replicas | quote }}
- name: PADDOCK_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: PADDOCK_OPS_HOST
  value: "0.0.0.0"
- name: PADDOCK_OPS_PORT
  value: {{ .Values.opsPort | quote }}
{{- end -}}

{{/* A secret setting: (dict "name" "PADDOCK_X" "secret" "s" "key" "k"). */}}
{{- define "paddock.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret | quote }}
      key: {{ .key | quote }}
{{- end -}}

{{/* Probes on the ops port: ready once connected with live subscriptions, alive while the process answers. */}}
{{- define "paddock.probes" -}}
startupProbe:
  httpGet: { path: /healthz, port: ops }
  periodSeconds: 2
  failureThreshold: 60
readinessProbe:
  httpGet: { path: /readyz, port: ops }
  periodSeconds: 5
  failureThreshold: 3
livenessProbe:
  httpGet: { path: /healthz, port: ops }
  periodSeconds: 10
  failureThreshold: 6
{{- end -}}

{{/* The NATS user a runner connects as, and the variable its password is named by (shared/testing nats-auth.ts). */}}
{{- define "paddock.runnerUser" -}}
{{- printf "runner-%d-%s-%s" (len .pool) .pool .id -}}
{{- end -}}
{{- define "paddock.passwordVariable" -}}
{{- printf "%s_PASS" (regexReplaceAll "[^A-Z0-9]" (upper .) "_") -}}
{{- end -}}
