{{/* Names and labels, as Helm's own `helm create` scaffold and KEDA's chart make them. */}}

{{- define "llm-autoscaler.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release name when it already contains the chart's name (release "llm-autoscaler"
gives the same object names as deploy/), else <release>-llm-autoscaler. */}}
{{- define "llm-autoscaler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llm-autoscaler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "llm-autoscaler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-autoscaler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "llm-autoscaler.labels" -}}
helm.sh/chart: {{ include "llm-autoscaler.chart" . }}
{{ include "llm-autoscaler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The ServiceMonitor and PrometheusRules: asked for, or the Prometheus Operator is there. */}}
{{- define "llm-autoscaler.monitoring" -}}
{{- if or .Values.monitoring.enabled (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1") -}}
true
{{- end -}}
{{- end -}}

{{- define "llm-autoscaler.validate" -}}
{{- if not (has .Values.mode (list "direct" "keda" "advisory")) -}}
{{- fail (printf "mode: value %q must be one of direct, keda, advisory" .Values.mode) -}}
{{- end -}}
{{- if or (lt (int .Values.shards) 1) (ne (float64 .Values.shards) (float64 (int .Values.shards))) -}}
{{- fail (printf "shards: value %v must be a whole number >= 1" .Values.shards) -}}
{{- end -}}
{{- if lt (int .Values.replicaCount) 1 -}}
{{- fail (printf "replicaCount: value %v must be >= 1" .Values.replicaCount) -}}
{{- end -}}
{{- if and (eq .Values.shardScope "held") (or (eq (int .Values.shards) 1) (ne .Values.mode "direct")) -}}
{{- fail (printf "shardScope: value \"held\" needs shards > 1 (got %v) and mode direct (got %q)" .Values.shards .Values.mode) -}}
{{- end -}}
{{- end -}}
