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
{{- $_ := include "gw.checkConfig" . -}}
{{- $cfg := deepCopy .Values.config -}}
{{- with include "gw.redisUrl" . -}}
{{- $_ := set $cfg "redis" (dict "url" . "cluster" $.Values.redis.cluster) -}}
{{- end -}}
{{- $limits := default dict $cfg.limits -}}
{{- $pods := ternary .Values.autoscaling.maxReplicas .Values.replicas .Values.autoscaling.enabled -}}
{{- $_ := set $limits "replicas" (mul $pods .Values.workers) -}}
{{- $_ := set $cfg "limits" $limits -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Whether the release runs its own Redis: asked for, and no Redis of yours named. */}}
{{- define "gw.ownRedis" -}}{{ if and .Values.redis.enabled (not .Values.redis.url) }}true{{ end }}{{- end -}}

{{/* The Redis the gateway uses: yours (redis.url), the release's own, or none (empty). */}}
{{- define "gw.redisUrl" -}}
{{- if .Values.redis.url -}}{{ .Values.redis.url }}
{{- else if include "gw.ownRedis" . -}}{{ printf "redis://%s-redis:6379/0" (include "gw.name" . | trunc 57 | trimSuffix "-") }}
{{- end -}}
{{- end -}}

{{/* The admin key's variable when the chart generates the key (none of secrets.env, secrets.values or
     secrets.existingSecret gives it, and secrets.generateAdminKey), else empty. */}}
{{- define "gw.generatedAdminVar" -}}
{{- $vars := include "gw.keyVars" . | fromJson -}}
{{- $s := .Values.secrets -}}
{{- if and $s.generateAdminKey (not $s.existingSecret) -}}
{{- range $var, $_ := $vars.optional -}}
{{- $given := hasKey $s.values $var -}}
{{- range $s.env }}{{ if eq .name $var }}{{ $given = true }}{{ end }}{{ end -}}
{{- if not $given }}{{ $var }}{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The environment variables the config names for keys, as JSON {"required": {VAR: where},
     "optional": {VAR: where}}. Upstream, vendor and team keys are required: without a team key the
     gateway refuses to start, without an upstream key every request to it fails. The admin key is
     optional: without it the admin API is off. */}}
{{- define "gw.keyVars" -}}
{{- $_ := include "gw.checkConfig" . -}}{{/* a config the gateway refuses says so before what it names */}}
{{- $required := dict -}}
{{- $cfg := .Values.config -}}
{{- range $cfg.models -}}
{{- $model := .name -}}
{{- range $i, $t := .targets -}}
{{- if $t.api_key_env }}{{ $_ := set $required $t.api_key_env (printf "config.models[%s].targets[%d].api_key_env" $model $i) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- range $prefix, $v := $cfg.vendors -}}
{{- if $v.api_key_env }}{{ $_ := set $required $v.api_key_env (printf "config.vendors.%s.api_key_env" $prefix) }}{{ end -}}
{{- end -}}
{{- range $cfg.teams -}}
{{- $team := .id -}}
{{- range .keys -}}
{{- if .env }}{{ $_ := set $required .env (printf "config.teams[%s].keys[%s].env" $team .id) }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $optional := dict -}}
{{- $admin := default dict $cfg.admin -}}
{{- if not $admin.key_sha256 -}}
{{- $var := default "LLM_GATEWAY_ADMIN_KEY" $admin.key_env -}}
{{- if not (hasKey $required $var) }}{{ $_ := set $optional $var "the admin API key (config.admin.key_env)" }}{{ end -}}
{{- end -}}
{{- toJson (dict "required" $required "optional" $optional) -}}
{{- end -}}

{{/* The container's env: each key variable the config names, from the first of secrets.env (a Secret
     you manage, per variable), secrets.values (the Secret this chart writes) or secrets.existingSecret
     (a Secret you manage, keys named as the variables). A required variable with none fails the
     render; a variable given but named nowhere in the config is refused, so that no Secret the
     gateway never reads is required. */}}
{{- define "gw.env" -}}
{{- $vars := include "gw.keyVars" . | fromJson -}}
{{- $named := merge (dict) $vars.required $vars.optional -}}
{{- $refs := dict -}}
{{- $metrics := include "gw.metricsToken" . | fromJson -}}
{{- $hint := printf " (the metrics token, %s, comes from metrics.token or metrics.existingSecret)" (include "gw.metricsVar" .) -}}
{{- range .Values.secrets.env -}}
{{- if not (hasKey $named .name) }}{{ fail (printf "secrets.env: %s is named nowhere in the config (api_key_env, keys[].env, admin.key_env), so no Secret should be needed for it%s" .name (ternary $hint "" (eq .name (include "gw.metricsVar" $)))) }}{{ end -}}
{{- $_ := set $refs .name (dict "name" .secretName "key" .key) -}}
{{- end -}}
{{- range $var, $_ := .Values.secrets.values -}}
{{- if not (hasKey $named $var) }}{{ fail (printf "secrets.values: %s is named nowhere in the config (api_key_env, keys[].env, admin.key_env)%s" $var (ternary $hint "" (eq $var (include "gw.metricsVar" $)))) }}{{ end -}}
{{- end -}}
{{- $env := list -}}
{{- range $var := keys $named | sortAlpha -}}
{{- $optional := hasKey $vars.optional $var -}}
{{- $ref := get $refs $var -}}
{{- if and (not $ref) (hasKey $.Values.secrets.values $var) }}{{ $ref = dict "name" (include "gw.name" $) "key" $var }}{{ end -}}
{{- if and (not $ref) $.Values.secrets.existingSecret -}}
{{- /* an optional key may be absent from your Secret: the pod starts without it */ -}}
{{- $ref = dict "name" $.Values.secrets.existingSecret "key" $var -}}
{{- if $optional }}{{ $_ := set $ref "optional" true }}{{ end -}}
{{- end -}}
{{- if and (not $ref) (eq $var (include "gw.generatedAdminVar" $)) -}}
{{- $ref = dict "name" (printf "%s-admin" (include "gw.name" $ | trunc 57 | trimSuffix "-")) "key" $var -}}
{{- end -}}
{{- if and (not $ref) (not $optional) -}}
{{- fail (printf "%s names %s: give it in secrets.values.%s, or a Secret holding it (secrets.existingSecret, or secrets.env)" (get $vars.required $var) $var $var) -}}
{{- end -}}
{{- if $ref -}}
{{- $env = append $env (dict "name" $var "valueFrom" (dict "secretKeyRef" $ref)) -}}
{{- end -}}
{{- end -}}
{{- with $metrics -}}
{{- $env = append $env (dict "name" .var "valueFrom" (dict "secretKeyRef" .ref)) -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* The variable the gateway reads its metrics token from: config.server.metrics_token_env. */}}
{{- define "gw.metricsVar" -}}
{{- $_ := include "gw.checkShape" . -}}{{/* a config of the wrong shape says so before it is read */}}
{{- dig "server" "metrics_token_env" "LLM_GATEWAY_METRICS_TOKEN" .Values.config -}}
{{- end -}}

{{/* The metrics token, as JSON {"var": VAR, "ref": a secretKeyRef}, or {} when none is given (then
     /metrics and /ready's detail are open). The pods and the ServiceMonitor read the same key: the
     scrape cannot go without the token the gateway asks for. It is a value of its own, not one of
     secrets.*, because the ServiceMonitor must know it is there: a key that may be absent from a
     Secret of yours would leave the scrape refused. */}}
{{- define "gw.metricsToken" -}}
{{- $m := .Values.metrics -}}
{{- $var := include "gw.metricsVar" . -}}
{{- if and $m.token $m.existingSecret }}{{ fail "metrics: give token or existingSecret, not both" }}{{ end -}}
{{- $vars := include "gw.keyVars" . | fromJson -}}
{{- if and (or $m.token $m.existingSecret) (or (hasKey $vars.required $var) (hasKey $vars.optional $var)) -}}
{{- fail (printf "config.server.metrics_token_env names %s, which the config names for another key too" $var) -}}
{{- end -}}
{{- if $m.token -}}
{{- toJson (dict "var" $var "ref" (dict "name" (include "gw.name" .) "key" $var)) -}}
{{- else if $m.existingSecret -}}
{{- toJson (dict "var" $var "ref" (dict "name" $m.existingSecret "key" $m.existingSecretKey)) -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* What the chart's own Secret holds, as JSON (empty: no Secret): secrets.values, and metrics.token
     under its variable's name. Its checksum rolls the pods when a key changes. */}}
{{- define "gw.secretData" -}}
{{- $data := deepCopy .Values.secrets.values -}}
{{- if .Values.metrics.token }}{{ $_ := set $data (include "gw.metricsVar" .) .Values.metrics.token }}{{ end -}}
{{- if $data }}{{ toJson $data }}{{ end -}}
{{- end -}}

{{/* The release's own Redis pods: a name of their own, so the gateway's Service never selects them. */}}
{{- define "gw.redisSelector" -}}
app.kubernetes.io/name: llm-gateway-redis
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end -}}
