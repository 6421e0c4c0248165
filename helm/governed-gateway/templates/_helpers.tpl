{{/*
Named templates of the chart, each prefixed with the chart name.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "governed-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* release-chart, or fullnameOverride; at most 63 characters (a DNS label). */}}
{{- define "governed-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* chart-version, as the helm.sh/chart label wants it. */}}
{{- define "governed-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels every resource carries. */}}
{{- define "governed-gateway.labels" -}}
helm.sh/chart: {{ include "governed-gateway.chart" . }}
{{ include "governed-gateway.instanceLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: governed-gateway
{{- end }}

{{/* The release's pods of every component (the NetworkPolicy selects these). */}}
{{- define "governed-gateway.instanceLabels" -}}
app.kubernetes.io/name: {{ include "governed-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The serving pods only (the Service, HPA and PDB select these; the migration Job's pods are not among them). */}}
{{- define "governed-gateway.selectorLabels" -}}
{{ include "governed-gateway.instanceLabels" . }}
app.kubernetes.io/component: gateway
{{- end }}

{{/* The ServiceAccount the pods run as. */}}
{{- define "governed-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "governed-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The gateway image: repository@digest when a digest is given, else repository:tag. */}}
{{- define "governed-gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* True (non-empty) when more than one serving pod can run. */}}
{{- define "governed-gateway.scaledOut" -}}
{{- if or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1) }}true{{ end }}
{{- end }}

{{/*
Refuse value combinations that would deploy something broken or unsafe, with a message naming the values.
*/}}
{{- define "governed-gateway.validate" -}}
{{- if and (include "governed-gateway.scaledOut" .) (not .Values.secrets.databaseUrl.name) }}
{{- fail "secrets.databaseUrl.name is required when replicaCount > 1 or autoscaling.enabled: the embedded SQLite store lives inside one pod" }}
{{- end }}
{{- if and (eq .Values.policies.source "configMap") (not .Values.policies.files) }}
{{- fail "policies.files is empty: policies.source configMap needs the policy files (relative path -> content)" }}
{{- end }}
{{- if and (eq .Values.policies.source "bundle") (not .Values.policies.bundle.url) }}
{{- fail "policies.bundle.url is required when policies.source is bundle" }}
{{- end }}
{{- if and .Values.opa.sidecar.enabled (ne .Values.policies.source "bundle") }}
{{- fail "opa.sidecar.enabled needs policies.source bundle: the sidecar loads its policies from policies.bundle.url" }}
{{- end }}
{{- if and .Values.persistence.existingClaim (include "governed-gateway.scaledOut" .) }}
{{- fail "persistence.existingClaim holds one pod's SQLite store: use it with one replica and no autoscaling" }}
{{- end }}
{{- if and (eq .Values.otel.exporter "otlp") (not .Values.otel.endpoint) }}
{{- fail "otel.endpoint is required when otel.exporter is otlp" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (not .Values.networkPolicy.extraEgress) }}
{{- $egress := .Values.networkPolicy.egress }}
{{- if and .Values.secrets.databaseUrl.name (not (or $egress.database.cidrs $egress.database.podSelector)) }}
{{- fail "networkPolicy.egress.database is empty: the pods could not reach the database of secrets.databaseUrl (set cidrs or podSelector)" }}
{{- end }}
{{- if and (eq .Values.policies.source "bundle") (not (or $egress.bundleServer.cidrs $egress.bundleServer.podSelector)) }}
{{- fail "networkPolicy.egress.bundleServer is empty: the pods could not reach policies.bundle.url (set cidrs or podSelector)" }}
{{- end }}
{{- if and (eq .Values.otel.exporter "otlp") (not (or $egress.otelCollector.cidrs $egress.otelCollector.podSelector)) }}
{{- fail "networkPolicy.egress.otelCollector is empty: the pods could not reach otel.endpoint (set cidrs or podSelector)" }}
{{- end }}
{{- if and .Values.opa.url (not .Values.opa.sidecar.enabled) (not (or $egress.opa.cidrs $egress.opa.podSelector)) }}
{{- fail "networkPolicy.egress.opa is empty: the pods could not reach opa.url (set cidrs or podSelector)" }}
{{- end }}
{{- end }}
{{- end }}

{{/* One env entry read from an existing Secret: (list ENV_NAME {name, key}). Nothing when the name is empty. */}}
{{- define "governed-gateway.secretEnv" -}}
{{- $env := index . 0 }}
{{- $ref := index . 1 }}
{{- if $ref.name }}
- name: {{ $env }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name | quote }}
      key: {{ $ref.key | quote }}
{{- end }}
{{- end }}

{{/* The gateway's environment: GATEWAY_ settings only, secrets by reference. Shared by the Deployment and the migration Job. */}}
{{- define "governed-gateway.env" -}}
- name: GATEWAY_DATA_DIR
  value: {{ .Values.gateway.dataDir | quote }}
- name: GATEWAY_HOST
  value: "0.0.0.0"
- name: GATEWAY_PORT
  value: {{ .Values.service.port | quote }}
{{- $shutdown := .Values.shutdown }}
{{- if ge (add $shutdown.preStopSleepSeconds $shutdown.drainSeconds) (int $shutdown.terminationGracePeriodSeconds) }}
{{- fail "shutdown: preStopSleepSeconds + drainSeconds must stay under terminationGracePeriodSeconds, or the kubelet kills the pod before the decision log is flushed and the last checkpoint signed" }}
{{- end }}
- name: GATEWAY_DRAIN_SECONDS
  value: {{ $shutdown.drainSeconds | quote }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_DATABASE_URL" .Values.secrets.databaseUrl) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_JWT_SECRET" .Values.secrets.jwtSecret) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_JWT_PUBLIC_KEY" .Values.secrets.jwtPublicKey) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_AUDIT_KEY" .Values.secrets.auditKey) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_AUDIT_SESSION_KEY" .Values.secrets.auditSessionKey) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_LLM_KEY" .Values.secrets.llmKey) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_EMBEDDINGS_KEY" .Values.secrets.embeddingsKey) }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_WEAVIATE_API_KEY" .Values.secrets.weaviateApiKey) }}
{{- if .Values.secrets.auditSigningKey.name }}
{{- if not .Values.audit.checkpointsClaim }}
{{- fail "audit.checkpointsClaim is required with secrets.auditSigningKey: the signed checkpoints need a PersistentVolumeClaim of their own (on an emptyDir or the data volume every new pod starts without them, and refuses to sign the chains it finds)" }}
{{- end }}
{{- if eq .Values.audit.checkpointsClaim .Values.persistence.existingClaim }}
{{- fail "audit.checkpointsClaim must not be persistence.existingClaim: the checkpoints must live outside the data volume" }}
{{- end }}
{{- if or (eq (clean .Values.audit.checkpointsMountPath) (clean .Values.gateway.dataDir)) (hasPrefix (printf "%s/" (clean .Values.gateway.dataDir)) (clean .Values.audit.checkpointsMountPath)) }}
{{- fail "audit.checkpointsMountPath must lie outside gateway.dataDir" }}
{{- end }}
- name: GATEWAY_AUDIT_SIGNING_KEY
  value: /etc/gateway/audit/signing-key.pem
- name: GATEWAY_AUDIT_CHECKPOINTS
  value: {{ printf "%s/%s" .Values.audit.checkpointsMountPath .Values.audit.checkpointsFile | quote }}
{{- end }}
{{- if eq .Values.policies.source "configMap" }}
- name: GATEWAY_POLICIES_DIR
  value: /etc/gateway/policies
{{- else if eq .Values.policies.source "bundle" }}
- name: GATEWAY_POLICY_BUNDLE
  value: {{ .Values.policies.bundle.url | quote }}
{{- include "governed-gateway.secretEnv" (list "GATEWAY_POLICY_BUNDLE_KEY" .Values.secrets.policyBundleKey) }}
{{- if .Values.secrets.policyBundleKey.name }}
- name: GATEWAY_POLICY_BUNDLE_KEY_ALG
  value: {{ .Values.policies.bundle.keyAlgorithm | quote }}
{{- end }}
{{- with .Values.policies.bundle.scope }}
- name: GATEWAY_POLICY_BUNDLE_SCOPE
  value: {{ . | quote }}
{{- end }}
{{- if .Values.policies.bundle.pollSeconds }}
- name: GATEWAY_POLICY_POLL_SECONDS
  value: {{ .Values.policies.bundle.pollSeconds | quote }}
{{- end }}
{{- end }}
{{- if .Values.opa.sidecar.enabled }}
- name: GATEWAY_OPA_URL
  value: "http://localhost:8181"
- name: GATEWAY_OPA_PUSH_POLICIES
  value: "false"
{{- else if .Values.opa.url }}
- name: GATEWAY_OPA_URL
  value: {{ .Values.opa.url | quote }}
- name: GATEWAY_OPA_PUSH_POLICIES
  value: {{ .Values.opa.pushPolicies | quote }}
{{- end }}
{{- with .Values.decisionLog.url }}
- name: GATEWAY_DECISION_LOG_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.decisionLog.file }}
- name: GATEWAY_DECISION_LOG
  value: {{ printf "%s/%s" $.Values.gateway.dataDir . | quote }}
{{- end }}
- name: GATEWAY_OTEL_EXPORTER
  value: {{ .Values.otel.exporter | quote }}
{{- with .Values.otel.endpoint }}
- name: GATEWAY_OTEL_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: GATEWAY_OTEL_SERVICE_NAME
  value: {{ .Values.otel.serviceName | quote }}
- name: GATEWAY_METRICS
  value: {{ ternary "on" "off" .Values.metrics.enabled | quote }}
- name: GATEWAY_METRICS_TENANT_LABEL
  value: {{ ternary "on" "off" .Values.metrics.tenantLabel | quote }}
{{- if and .Values.ingress.enabled .Values.ingress.hosts (not (hasKey .Values.gateway.env "GATEWAY_PUBLIC_URL")) }}
{{- /* The URL clients reach the gateway by (the MCP OAuth metadata names it instead of the request's Host). */}}
- name: GATEWAY_PUBLIC_URL
  value: {{ printf "%s://%s" (ternary "https" "http" (not (empty .Values.ingress.tls))) (index .Values.ingress.hosts 0).host | quote }}
{{- end }}
{{- range $name, $value := .Values.gateway.env }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}

{{/* Where the process may write (the root filesystem is read-only): the data dir, /tmp, and the
image user's ~/.cache, where onnxruntime keeps a small telemetry database it opens at start. */}}
{{- define "governed-gateway.writableMounts" -}}
- name: data
  mountPath: {{ .Values.gateway.dataDir }}
- name: tmp
  mountPath: /tmp
- name: cache
  mountPath: /home/gateway/.cache
{{- end }}

{{/* The scratch volumes behind writableMounts, other than data. */}}
{{- define "governed-gateway.scratchVolumes" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
- name: cache
  emptyDir:
    sizeLimit: 16Mi
{{- end }}

{{/* Prometheus's annotation-based discovery: scrape /metrics on the gateway's port. */}}
{{- define "governed-gateway.scrapeAnnotations" -}}
{{- if and .Values.metrics.enabled .Values.metrics.scrapeAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/path: /metrics
prometheus.io/port: {{ .Values.service.port | quote }}
{{- end }}
{{- end }}
