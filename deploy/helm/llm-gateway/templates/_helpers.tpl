{{- define "gw.name" -}}{{ .Release.Name }}-llm-gateway{{- end -}}
{{- define "gw.labels" -}}
app.kubernetes.io/name: llm-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
