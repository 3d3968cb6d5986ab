{{/* The gateway's own checks of .Values.config beyond its shapes (_config_shape.tpl): what its loader
     checks in code, in the order the loader meets them. Each refusal fails the render with the line
     `llm-gateway check-config` prints, with "config" for the file's name. The validators of the config
     models (gateway/runtime/config.py and spend_config.py) are "gw.rule.<Section>" and
     "gw.rule.<Section>.<field>" below: the shape check runs each where pydantic runs it (a field's once
     its value is of the right shape, a section's once all its fields are), so that of several mistakes
     the one check-config names is the one named here; `config-schema --chart` lists them from the
     models (a validator without its template fails every render). Then what parse_config cross-checks
     (names, prices), web/app.py check_target (providers) and the key holder, each failing at once.
     tests/unit/test_helm_config.py runs every refusal site of the loader through both and compares the
     lines; a new rule there without its twin here fails that test. The providers come from
     _gateway.tpl, generated from the gateway's registries. */}}
{{- define "gw.checkConfig" -}}
{{- include "gw.checkShape" . -}}
{{- $c := .Values.config -}}
{{- include "gw.checkTeamModels" $c -}}
{{- include "gw.checkPrices" $c -}}
{{- include "gw.checkProviders" $c -}}
{{- include "gw.checkKeyHolder" . -}}
{{- end -}}

{{/* check-config's line: "config: <where>: <why>". */}}
{{- define "gw.refuse" -}}{{ fail (printf "config: %s: %s" (index . 0) (index . 1)) }}{{- end -}}

{{/* Python's repr of a string, as the loader quotes names: 'x', or "x" when x holds ' and no ";
     of a number or a bool as the pod's file holds it (a number with no fraction is an integer). */}}
{{- define "gw.repr" -}}
{{- if kindIs "invalid" . }}None
{{- else if kindIs "bool" . }}{{ ternary "True" "False" . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}{{ . }}
{{- else if kindIs "slice" . }}[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ include "gw.repr" $v }}{{ end }}]
{{- else if kindIs "map" . }}{{ "{" }}{{ range $i, $k := keys . | sortAlpha }}{{ if $i }}, {{ end }}{{ include "gw.repr" $k }}: {{ include "gw.repr" (get $ $k) }}{{ end }}{{ "}" }}
{{- else if and (contains "'" (toString .)) (not (contains "\"" (toString .))) }}"{{ include "gw.escapes" . }}"
{{- else }}'{{ include "gw.escapes" . | replace "'" "\\'" }}'{{ end -}}
{{- end -}}

{{/* A string as Python's repr writes it between its quotes: backslash, tab, newline, return escaped. */}}
{{- define "gw.escapes" -}}
{{- toString . | replace "\\" "\\\\" | replace "\t" "\\t" | replace "\n" "\\n" | replace "\r" "\\r" -}}
{{- end -}}

{{/* (list item index): a list item's place in a key path as the loader writes it: [<its name or id>] or [index]. */}}
{{- define "gw.at" -}}
{{- $item := index . 0 -}}
{{- $label := "" -}}
{{- if kindIs "map" $item }}{{ $label = or $item.name $item.id }}{{ end -}}
{{- if $label }}[{{ include "gw.repr" $label }}]{{ else }}[{{ index . 1 }}]{{ end -}}
{{- end -}}

{{/* The validators: each takes (dict "v" value "at" path) and gives its problems as _config_shape.tpl's
     records ("gw.problem"); the first is the one pydantic raises. */}}

{{/* config._http_url: an address the gateway calls over HTTP. */}}
{{- define "gw.rule.url" -}}
{{- if not (or (hasPrefix "http://" .v) (hasPrefix "https://" .v)) }}{{ include "gw.problem" (list "e" .at "must start with http:// or https://") }}{{ end -}}
{{- end -}}

{{- define "gw.rule.Target.base_url" -}}{{ if .v }}{{ include "gw.rule.url" . }}{{ end }}{{- end -}}

{{- define "gw.rule.TracingConfig.endpoint" -}}{{ include "gw.rule.url" . }}{{- end -}}

{{- define "gw.rule.Target.replicas" -}}
{{- range .v }}{{ include "gw.rule.url" (dict "v" . "at" $.at) }}{{ end -}}
{{- $seen := dict -}}
{{- range .v -}}
{{- $url := regexReplaceAll "/+$" . "" -}}
{{- if hasKey $seen $url }}{{ include "gw.problem" (list "e" $.at "a replica is listed twice") }}{{ end -}}
{{- $_ := set $seen $url true -}}
{{- end -}}
{{- end -}}

{{/* Out of reach at render: the pod's image holds the time zone database; the chart writes redis. */}}
{{- define "gw.rule.SpendSettings.time_zone" -}}{{- end -}}
{{- define "gw.rule.RedisConfig.url" -}}{{- end -}}

{{/* config.Balance: KV events steer by prefix. */}}
{{- define "gw.rule.Balance" -}}
{{- if not (kindIs "invalid" .v.kv_events) -}}
{{- $strategy := default "prefix" .v.strategy -}}
{{- if has $strategy (list "round-robin" "least-loaded") -}}
{{- include "gw.problem" (list "e" .at (printf "kv_events needs strategy prefix or kv-shared, not %s" $strategy)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* config.Target: one place, and what its pool's events need. */}}
{{- define "gw.rule.Target" -}}
{{- $t := .v -}}
{{- $at := .at -}}
{{- $replicas := default list $t.replicas -}}
{{- $events := (default dict $t.balance).kv_events -}}
{{- $given := 0 -}}
{{- if $t.base_url }}{{ $given = add1 $given }}{{ end -}}
{{- if $replicas }}{{ $given = add1 $given }}{{ end -}}
{{- if not (kindIs "invalid" $t.engine) }}{{ $given = add1 $given }}{{ end -}}
{{- if gt $given 1 }}{{ include "gw.problem" (list "e" $at "give exactly one of 'base_url', 'replicas' or 'engine'") }}{{ end -}}
{{- if and (not (kindIs "invalid" $events)) (not $replicas) }}{{ include "gw.problem" (list "e" $at "balance.kv_events needs 'replicas'") }}{{ end -}}
{{- range $key := list "endpoints" "replay_endpoints" -}}
{{- $listed := default list (get (default dict $events) $key) -}}
{{- if and $listed (ne (len $listed) (len $replicas)) -}}
{{- include "gw.problem" (list "e" $at (printf "balance.kv_events.%s: give one per replica, in the same order" $key)) -}}
{{- end -}}
{{- end -}}
{{- if and $t.api_key_env $t.api_key_file }}{{ include "gw.problem" (list "e" $at "give at most one of 'api_key_env' or 'api_key_file'") }}{{ end -}}
{{- end -}}

{{/* config.Queue: a reserve below a fixed capacity (numbers as pydantic reads them: "4", " 1_000 "). */}}
{{- define "gw.rule.Queue" -}}
{{- $capacity := ternary "!auto" (include "gw.number.int" .v.capacity) (eq (toString .v.capacity) "auto") -}}
{{- $reserve := include "gw.number.int" (default 0 .v.reserve) -}}
{{- if and (not (hasPrefix "!" $capacity)) (ge (float64 $reserve) (float64 $capacity)) -}}
{{- include "gw.problem" (list "e" .at "reserve: must be below capacity (a slot kept free needs a release to come)") -}}
{{- end -}}
{{- end -}}

{{/* config.KvEvents: where vLLM publishes a pool's KV-cache events. */}}
{{- define "gw.rule.KvEvents" -}}
{{- $e := .v -}}
{{- $endpoints := default list $e.endpoints -}}
{{- $replay := default list $e.replay_endpoints -}}
{{- if eq (not (empty $endpoints)) (not (kindIs "invalid" $e.port)) }}{{ include "gw.problem" (list "e" .at "give exactly one of 'endpoints' or 'port'") }}{{ end -}}
{{- if and $replay (not (kindIs "invalid" $e.replay_port)) }}{{ include "gw.problem" (list "e" .at "give at most one of 'replay_endpoints' or 'replay_port'") }}{{ end -}}
{{- range concat $endpoints $replay -}}
{{- if not (or (hasPrefix "tcp://" .) (hasPrefix "ipc://" .)) }}{{ include "gw.problem" (list "e" $.at "endpoints must start with tcp:// or ipc://") }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* config.KeyEntry: one source per key. */}}
{{- define "gw.rule.KeyEntry" -}}
{{- $k := .v -}}
{{- if eq (kindIs "invalid" $k.sha256) (kindIs "invalid" $k.env) }}{{ include "gw.problem" (list "e" .at "give exactly one of 'sha256' or 'env'") }}{{ end -}}
{{- if and (not (kindIs "invalid" $k.sha256)) (not (regexMatch "^[0-9a-f]{64}$" $k.sha256)) -}}
{{- include "gw.problem" (list "e" .at "'sha256' must be 64 lowercase hex digits") -}}
{{- end -}}
{{- end -}}

{{/* spend_config.Budget. An amount's decimals are counted on its text, as the loader reads it
     (a float's shortest form, as Python's repr writes it; 1e-07 is 7 decimals). */}}
{{- define "gw.rule.Budget" -}}
{{- $b := .v -}}
{{- if and (kindIs "invalid" $b.amount) (kindIs "invalid" $b.tokens) }}{{ include "gw.problem" (list "e" .at "give 'amount', 'tokens' or both") }}{{ end -}}
{{- if not (kindIs "invalid" $b.amount) -}}
{{- $text := lower (include "gw.strip" (toString $b.amount) | replace "_" "") -}}
{{- $exponent := 0 -}}
{{- if contains "e" $text }}{{ $exponent = atoi (last (splitList "e" $text)) }}{{ $text = first (splitList "e" $text) }}{{ end -}}
{{- $parts := splitList "." $text -}}
{{- $fraction := ternary (regexReplaceAll "0+$" (last $parts) "") "" (gt (len $parts) 1) -}}
{{- if gt (sub (len $fraction) $exponent) 6 -}}
{{- include "gw.problem" (list "e" .at "'amount' is kept in millionths of the currency: at most 6 decimals") -}}
{{- end -}}
{{- end -}}
{{- if ne (eq (default "month" $b.period) "rolling") (not (kindIs "invalid" $b.window_seconds)) -}}
{{- include "gw.problem" (list "e" .at "'window_seconds' is given with period: rolling, and only then") -}}
{{- end -}}
{{- end -}}

{{/* spend_config.Price: one read price. */}}
{{- define "gw.rule.Price" -}}
{{- if and (not (kindIs "invalid" .v.cache_read)) (not (kindIs "invalid" .v.cached_input)) -}}
{{- include "gw.problem" (list "e" .at "give 'cache_read' or its earlier name 'cached_input', not both") -}}
{{- end -}}
{{- end -}}

{{/* spend_config.SpendSettings: each (model, target) priced once. */}}
{{- define "gw.rule.SpendSettings" -}}
{{- $seen := dict -}}
{{- range .v.prices -}}
{{- $key := printf "%s %s" (include "gw.repr" .model) (include "gw.repr" .target) -}}
{{- if hasKey $seen $key -}}
{{- include "gw.problem" (list "e" $.at (printf "prices: model %s target %s is priced twice" (include "gw.repr" .model) (include "gw.repr" .target))) -}}
{{- end -}}
{{- $_ := set $seen $key true -}}
{{- end -}}
{{- end -}}

{{/* config.GatewayConfig: names declared once (_unique), then the queue's classes (_classes_known).
     Placed by position, as the loader places them. */}}
{{- define "gw.rule.GatewayConfig" -}}
{{- include "gw.checkUnique" .v -}}
{{- include "gw.checkClasses" .v -}}
{{- end -}}

{{/* config.GatewayConfig._unique: a model name or alias, a team id, declared once. */}}
{{- define "gw.checkUnique" -}}
{{- $first := dict -}}
{{- range $i, $m := .models -}}
{{- range $name := prepend (default list $m.aliases) $m.name -}}
{{- if hasKey $first $name -}}
{{- $f := get $first $name -}}
{{- $where := ternary "" (printf "; first at models[%d]" $f) (eq $f $i) -}}
{{- include "gw.problem" (list "e" (printf "models[%d]" $i) (printf "model name %s is declared twice%s" (include "gw.repr" $name) $where)) -}}
{{- end -}}
{{- $_ := set $first $name $i -}}
{{- end -}}
{{- end -}}
{{- $teams := dict -}}
{{- range $i, $team := .teams -}}
{{- if hasKey $teams $team.id -}}
{{- include "gw.problem" (list "e" (printf "teams[%d].id" $i) (printf "team id %s is declared twice; first at teams[%d]" (include "gw.repr" $team.id) (get $teams $team.id))) -}}
{{- end -}}
{{- $_ := set $teams $team.id $i -}}
{{- end -}}
{{- end -}}

{{/* config.GatewayConfig._classes_known: the queue's classes, and every class a team or key names. */}}
{{- define "gw.checkClasses" -}}
{{- $classes := default (list "interactive" "batch") .priorities -}}
{{- if ne (len $classes) (len (uniq $classes)) }}{{ include "gw.problem" (list "e" "priorities" "a class is listed twice") }}{{ end -}}
{{- $token := (include "gw.registry" . | fromJson).priorityClass -}}
{{- range $i, $name := $classes -}}
{{- if not (regexMatch (printf "^(?:%s)$" $token) $name) -}}
{{- $why := "letters, digits, '_', '.', '-' (up to 64), as the X-Gateway-Priority header names it" -}}
{{- include "gw.problem" (list "e" (printf "priorities[%d]" $i) (printf "a class is one token of %s, not %s" $why (include "gw.repr" (trunc 64 $name)))) -}}
{{- end -}}
{{- end -}}
{{- $known := join ", " $classes -}}
{{- range $i, $team := .teams -}}
{{- if and (not (kindIs "invalid" $team.priority)) (not (has $team.priority $classes)) -}}
{{- include "gw.problem" (list "e" (printf "teams[%d].priority" $i) (printf "unknown class %s (known: %s)" (include "gw.repr" $team.priority) $known)) -}}
{{- end -}}
{{- range $j, $key := $team.keys -}}
{{- if and (not (kindIs "invalid" $key.priority)) (not (has $key.priority $classes)) -}}
{{- include "gw.problem" (list "e" (printf "teams[%d].keys[%d].priority" $i $j) (printf "unknown class %s (known: %s)" (include "gw.repr" $key.priority) $known)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The names each model and alias answers to, as a dict (config._check_names, spend_config.price_problem). */}}
{{- define "gw.modelNames" -}}
{{- $names := dict -}}
{{- range .models }}{{ range prepend (default list .aliases) .name }}{{ $_ := set $names . true }}{{ end }}{{ end -}}
{{- toJson $names -}}
{{- end -}}

{{/* config._check_names: a team's models are names the model table resolves (routing/table.py). */}}
{{- define "gw.checkTeamModels" -}}
{{- $names := include "gw.modelNames" . | fromJson -}}
{{- $vendors := default dict .vendors -}}
{{- $known := list -}}
{{- range .models }}{{ $known = append $known .name }}{{ end -}}
{{- range keys $vendors | sortAlpha }}{{ $known = append $known (printf "%s/..." .) }}{{ end -}}
{{- range $team := .teams -}}
{{- range $name := default list $team.models -}}
{{- $parts := splitList "/" $name -}}
{{- $ok := hasKey $names $name -}}
{{- if and (eq (len $parts) 3) (or (hasKey $names (join "/" (slice $parts 0 2))) (hasKey $names (index $parts 1))) }}{{ $ok = true }}{{ end -}}
{{- if and (ge (len $parts) 2) (or (hasKey $names (index $parts 1)) (and (hasKey $vendors (index $parts 0)) (index $parts 1))) }}{{ $ok = true }}{{ end -}}
{{- if not $ok -}}
{{- include "gw.refuse" (list (printf "teams[%s].models" (include "gw.repr" $team.id)) (printf "unknown model %s (known: %s)" (include "gw.repr" $name) (default "none" (join ", " $known)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* spend_config.price_problem: a price names a model's name (or <vendor>/*, local) and one of its targets. */}}
{{- define "gw.checkPrices" -}}
{{- $targets := dict -}}
{{- $aliases := dict -}}
{{- $order := list -}}
{{- range $m := .models -}}
{{- $names := list -}}
{{- range $t := $m.targets }}{{ $names = append $names (or $t.name (printf "%s:%s" $t.provider (or $t.model $m.name))) }}{{ end -}}
{{- $_ := set $targets $m.name $names -}}
{{- $order = append $order $m.name -}}
{{- range default list $m.aliases }}{{ $_ := set $aliases . $m.name }}{{ end -}}
{{- end -}}
{{- $wildcards := list "local" -}}
{{- range keys (default dict .vendors) }}{{ $wildcards = append $wildcards (printf "%s/*" .) }}{{ end -}}
{{- range $i, $p := (default dict .spend).prices -}}
{{- $at := printf "spend.prices[%d]" $i -}}
{{- if hasKey $aliases $p.model -}}
{{- include "gw.refuse" (list (printf "%s.model" $at) (printf "%s is an alias: price the model's name, %s" (include "gw.repr" $p.model) (include "gw.repr" (get $aliases $p.model)))) -}}
{{- else if hasKey $targets $p.model -}}
{{- $own := get $targets $p.model -}}
{{- if and (not (kindIs "invalid" $p.target)) (not (has $p.target $own)) -}}
{{- include "gw.refuse" (list (printf "%s.target" $at) (printf "model %s has no target %s (its targets: %s)" (include "gw.repr" $p.model) (include "gw.repr" $p.target) (join ", " (sortAlpha (uniq $own))))) -}}
{{- end -}}
{{- else if not (has $p.model $wildcards) -}}
{{- include "gw.refuse" (list (printf "%s.model" $at) (printf "unknown model %s (known: %s)" (include "gw.repr" $p.model) (join ", " (concat $order (sortAlpha $wildcards))))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* web/app.py check_target: the provider exists, runs its way, and takes the plugin features named. */}}
{{- define "gw.checkProviders" -}}
{{- $reg := include "gw.registry" . | fromJson -}}
{{- range $m := .models -}}
{{- range $i, $t := $m.targets -}}
{{- $at := printf "models[%s].targets[%d]" (include "gw.repr" $m.name) $i -}}
{{- $p := include "gw.repr" $t.provider -}}
{{- if hasKey $reg.inProcess $t.provider -}}
{{- if or $t.base_url $t.replicas }}{{ include "gw.refuse" (list $at (printf "provider %s runs in this process: give 'engine' (its arguments)" $p)) }}{{ end -}}
{{- else if not (hasKey $reg.http $t.provider) -}}
{{- include "gw.refuse" (list $at (printf "unknown provider %s (known: %s)" $p (join ", " (concat (keys $reg.http) (keys $reg.inProcess) | sortAlpha)))) -}}
{{- else if not (kindIs "invalid" $t.engine) -}}
{{- include "gw.refuse" (list $at (printf "'engine' is for in-process providers (%s), not %s" (join ", " (keys $reg.inProcess | sortAlpha)) $p)) -}}
{{- else if not (or $t.base_url $t.replicas) -}}
{{- include "gw.refuse" (list $at (printf "provider %s talks HTTP: give exactly one of 'base_url' or 'replicas'" $p)) -}}
{{- end -}}
{{- $takes := get (merge (dict) $reg.http $reg.inProcess) $t.provider -}}
{{- range $j, $name := default list $t.extra_features -}}
{{- if not (has $name $takes) -}}
{{- $why := printf "%s is not an extra feature of provider %s (it takes: %s)" (include "gw.repr" $name) $p (default "nothing" (join ", " $takes)) -}}
{{- include "gw.refuse" (list (printf "%s.extra_features[%d]" $at $j) $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* config_environment._someone_can_hold_a_key: with keys required and none in the config, an admin
     key to issue them: a hash in the config, or a Secret that gives it (yours may: the pod then decides). */}}
{{- define "gw.checkKeyHolder" -}}
{{- $c := .Values.config -}}
{{- $keyed := false -}}
{{- range $c.teams }}{{ if .keys }}{{ $keyed = true }}{{ end }}{{ end -}}
{{- if not (or (eq (default "keys" $c.auth) "none") $keyed) -}}
{{- $fix := "add keys to a team ({id, sha256} or {id, env}), or set auth: none for open access" -}}
{{- if not $c.teams }}{{ include "gw.refuse" (list "teams" (printf "none given, and auth: keys (the default) needs one with a key: %s" $fix)) }}{{ end -}}
{{- $admin := default dict $c.admin -}}
{{- $var := default "LLM_GATEWAY_ADMIN_KEY" $admin.key_env -}}
{{- $s := .Values.secrets -}}
{{- $given := or $admin.key_sha256 $s.existingSecret $s.generateAdminKey (hasKey (default dict $s.values) $var) -}}
{{- range $s.env }}{{ if eq .name $var }}{{ $given = true }}{{ end }}{{ end -}}
{{- if not $given -}}
{{- include "gw.refuse" (list "teams" (printf "no team has a key and no admin key (%s) is set to issue one: %s" $var $fix)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
