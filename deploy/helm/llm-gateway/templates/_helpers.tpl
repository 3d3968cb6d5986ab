{{/* Object names are DNS labels: at most 63 characters (a 53-character release name would make 65). */}}
{{- define "gw.name" -}}{{ printf "%s-llm-gateway" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}

{{- define "gw.selector" -}}
app.kubernetes.io/name: llm-gateway
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}

{{- define "gw.labels" -}}
{{ include "gw.selector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The gateway's config file: .Values.config plus what the chart owns: Redis, and among how many
     processes each limit is shared while Redis is unreachable (fail-open: each takes limit / replicas).
     Pods × workers, with the HPA's maximum: the shares never add up to more than the limit. */}}
{{- define "gw.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if .Values.redis.url -}}
{{- $_ := set $cfg "redis" (dict "url" .Values.redis.url "cluster" .Values.redis.cluster) -}}
{{- end -}}
{{- $limits := default dict $cfg.limits -}}
{{- $pods := ternary .Values.autoscaling.maxReplicas .Values.replicas .Values.autoscaling.enabled -}}
{{- $_ := set $limits "replicas" (mul $pods .Values.workers) -}}
{{- $_ := set $cfg "limits" $limits -}}
{{- toYaml $cfg -}}
{{- end -}}
