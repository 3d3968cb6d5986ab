{{/* The gateway's own checks of .Values.config, beyond the shapes values.schema.json holds: what its
     loader checks in code (gateway/runtime/config.py and spend_config.py validators, the names and
     prices parse_config cross-checks, web/app.py check_target), in the order the loader meets them.
     Each refusal fails the render with the line `llm-gateway check-config` prints, with "config" for
     the file's name. tests/unit/test_helm_config.py runs every refusal site of the loader through
     both and compares the lines; a new rule there without its twin here fails that test. The
     providers come from _gateway.tpl, generated from the gateway's registries. */}}
{{- define "gw.checkConfig" -}}
{{- include "gw.checkShape" . -}}
{{- $c := .Values.config -}}
{{- range $i, $m := $c.models -}}
{{- $at := printf "models%s" (include "gw.at" (list $m $i)) -}}
{{- range $j, $t := $m.targets -}}
{{- include "gw.checkTarget" (dict "t" $t "at" (printf "%s.targets%s" $at (include "gw.at" (list $t $j)))) -}}
{{- end -}}
{{- end -}}
{{- range $i, $team := $c.teams -}}
{{- $at := printf "teams%s" (include "gw.at" (list $team $i)) -}}
{{- range $j, $key := $team.keys -}}
{{- include "gw.checkKey" (dict "k" $key "at" (printf "%s.keys%s" $at (include "gw.at" (list $key $j)))) -}}
{{- end -}}
{{- include "gw.checkBudget" (dict "b" $team.budget "at" (printf "%s.budget" $at)) -}}
{{- include "gw.checkBudget" (dict "b" $team.key_budget "at" (printf "%s.key_budget" $at)) -}}
{{- end -}}
{{- include "gw.checkSpend" (default dict $c.spend) -}}
{{- with $c.tracing }}{{ include "gw.checkUrl" (list .endpoint "tracing.endpoint") }}{{ end -}}
{{- include "gw.checkUnique" $c -}}
{{- include "gw.checkClasses" $c -}}
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
{{- else if and (contains "'" (toString .)) (not (contains "\"" (toString .))) }}"{{ toString . | replace "\\" "\\\\" }}"
{{- else }}'{{ toString . | replace "\\" "\\\\" | replace "'" "\\'" }}'{{ end -}}
{{- end -}}

{{/* (list item index): a list item's place in a key path as the loader writes it: [<its name or id>] or [index]. */}}
{{- define "gw.at" -}}
{{- $item := index . 0 -}}
{{- $label := "" -}}
{{- if kindIs "map" $item }}{{ $label = or $item.name $item.id }}{{ end -}}
{{- if $label }}[{{ include "gw.repr" $label }}]{{ else }}[{{ index . 1 }}]{{ end -}}
{{- end -}}

{{/* (list value where): an address the gateway calls over HTTP (config._http_url). */}}
{{- define "gw.checkUrl" -}}
{{- $v := index . 0 -}}
{{- if not (kindIs "invalid" $v) -}}
{{- if not (or (hasPrefix "http://" $v) (hasPrefix "https://" $v)) }}{{ include "gw.refuse" (list (index . 1) "must start with http:// or https://") }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* A target's own validators (config.Target, Balance, KvEvents): fields first, then the target's. */}}
{{- define "gw.checkTarget" -}}
{{- $t := .t -}}
{{- $at := .at -}}
{{- if $t.base_url }}{{ include "gw.checkUrl" (list $t.base_url (printf "%s.base_url" $at)) }}{{ end -}}
{{- $replicas := default list $t.replicas -}}
{{- range $replicas }}{{ include "gw.checkUrl" (list . (printf "%s.replicas" $at)) }}{{ end -}}
{{- $seen := dict -}}
{{- range $replicas -}}
{{- $url := regexReplaceAll "/+$" . "" -}}
{{- if hasKey $seen $url }}{{ include "gw.refuse" (list (printf "%s.replicas" $at) "a replica is listed twice") }}{{ end -}}
{{- $_ := set $seen $url true -}}
{{- end -}}
{{- $balance := default dict $t.balance -}}
{{- $events := $balance.kv_events -}}
{{- if not (kindIs "invalid" $events) -}}
{{- include "gw.checkEvents" (dict "e" $events "at" (printf "%s.balance.kv_events" $at)) -}}
{{- $strategy := default "prefix" $balance.strategy -}}
{{- if has $strategy (list "round-robin" "least-loaded") -}}
{{- include "gw.refuse" (list (printf "%s.balance" $at) (printf "kv_events needs strategy prefix or kv-shared, not %s" $strategy)) -}}
{{- end -}}
{{- end -}}
{{- $given := 0 -}}
{{- if $t.base_url }}{{ $given = add1 $given }}{{ end -}}
{{- if $replicas }}{{ $given = add1 $given }}{{ end -}}
{{- if not (kindIs "invalid" $t.engine) }}{{ $given = add1 $given }}{{ end -}}
{{- if gt $given 1 }}{{ include "gw.refuse" (list $at "give exactly one of 'base_url', 'replicas' or 'engine'") }}{{ end -}}
{{- if and (not (kindIs "invalid" $events)) (not $replicas) }}{{ include "gw.refuse" (list $at "balance.kv_events needs 'replicas'") }}{{ end -}}
{{- range $key := list "endpoints" "replay_endpoints" -}}
{{- $listed := default list (get (default dict $events) $key) -}}
{{- if and $listed (ne (len $listed) (len $replicas)) -}}
{{- include "gw.refuse" (list $at (printf "balance.kv_events.%s: give one per replica, in the same order" $key)) -}}
{{- end -}}
{{- end -}}
{{- if and $t.api_key_env $t.api_key_file }}{{ include "gw.refuse" (list $at "give at most one of 'api_key_env' or 'api_key_file'") }}{{ end -}}
{{- end -}}

{{/* config.KvEvents: where vLLM publishes a pool's KV-cache events. */}}
{{- define "gw.checkEvents" -}}
{{- $e := .e -}}
{{- $endpoints := default list $e.endpoints -}}
{{- $replay := default list $e.replay_endpoints -}}
{{- if eq (not (empty $endpoints)) (not (kindIs "invalid" $e.port)) }}{{ include "gw.refuse" (list .at "give exactly one of 'endpoints' or 'port'") }}{{ end -}}
{{- if and $replay (not (kindIs "invalid" $e.replay_port)) }}{{ include "gw.refuse" (list .at "give at most one of 'replay_endpoints' or 'replay_port'") }}{{ end -}}
{{- range concat $endpoints $replay -}}
{{- if not (or (hasPrefix "tcp://" .) (hasPrefix "ipc://" .)) }}{{ include "gw.refuse" (list $.at "endpoints must start with tcp:// or ipc://") }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* config.KeyEntry: one source per key. */}}
{{- define "gw.checkKey" -}}
{{- $k := .k -}}
{{- if eq (kindIs "invalid" $k.sha256) (kindIs "invalid" $k.env) }}{{ include "gw.refuse" (list .at "give exactly one of 'sha256' or 'env'") }}{{ end -}}
{{- if and (not (kindIs "invalid" $k.sha256)) (not (regexMatch "^[0-9a-f]{64}$" $k.sha256)) -}}
{{- include "gw.refuse" (list .at "'sha256' must be 64 lowercase hex digits") -}}
{{- end -}}
{{- end -}}

{{/* spend_config.Budget. An amount's decimals are counted on its text, as the loader reads it
     (a float's shortest form, as Python's repr writes it; 1e-07 is 7 decimals). */}}
{{- define "gw.checkBudget" -}}
{{- $b := .b -}}
{{- if not (kindIs "invalid" $b) -}}
{{- if and (kindIs "invalid" $b.amount) (kindIs "invalid" $b.tokens) }}{{ include "gw.refuse" (list .at "give 'amount', 'tokens' or both") }}{{ end -}}
{{- if not (kindIs "invalid" $b.amount) -}}
{{- $text := lower (toString $b.amount) -}}
{{- $exponent := 0 -}}
{{- if contains "e" $text }}{{ $exponent = atoi (last (splitList "e" $text)) }}{{ $text = first (splitList "e" $text) }}{{ end -}}
{{- $parts := splitList "." $text -}}
{{- $fraction := ternary (regexReplaceAll "0+$" (last $parts) "") "" (gt (len $parts) 1) -}}
{{- if gt (sub (len $fraction) $exponent) 6 -}}
{{- include "gw.refuse" (list .at "'amount' is kept in millionths of the currency: at most 6 decimals") -}}
{{- end -}}
{{- end -}}
{{- if ne (eq (default "month" $b.period) "rolling") (not (kindIs "invalid" $b.window_seconds)) -}}
{{- include "gw.refuse" (list .at "'window_seconds' is given with period: rolling, and only then") -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* spend_config.Price and SpendSettings: one read price per price, each (model, target) priced once. */}}
{{- define "gw.checkSpend" -}}
{{- $seen := dict -}}
{{- range $i, $p := .prices -}}
{{- if and (not (kindIs "invalid" $p.cache_read)) (not (kindIs "invalid" $p.cached_input)) -}}
{{- include "gw.refuse" (list (printf "spend.prices%s" (include "gw.at" (list $p $i))) "give 'cache_read' or its earlier name 'cached_input', not both") -}}
{{- end -}}
{{- end -}}
{{- range .prices -}}
{{- $key := printf "%s %s" (include "gw.repr" .model) (include "gw.repr" .target) -}}
{{- if hasKey $seen $key -}}
{{- include "gw.refuse" (list "spend" (printf "prices: model %s target %s is priced twice" (include "gw.repr" .model) (include "gw.repr" .target))) -}}
{{- end -}}
{{- $_ := set $seen $key true -}}
{{- end -}}
{{- end -}}

{{/* config.GatewayConfig._unique: a model name or alias, a team id, declared once. */}}
{{- define "gw.checkUnique" -}}
{{- $first := dict -}}
{{- range $i, $m := .models -}}
{{- range $name := prepend (default list $m.aliases) $m.name -}}
{{- if hasKey $first $name -}}
{{- $f := get $first $name -}}
{{- $where := ternary "" (printf "; first at models[%d]" $f) (eq $f $i) -}}
{{- include "gw.refuse" (list (printf "models[%d]" $i) (printf "model name %s is declared twice%s" (include "gw.repr" $name) $where)) -}}
{{- end -}}
{{- $_ := set $first $name $i -}}
{{- end -}}
{{- end -}}
{{- $teams := dict -}}
{{- range $i, $team := .teams -}}
{{- if hasKey $teams $team.id -}}
{{- include "gw.refuse" (list (printf "teams[%d].id" $i) (printf "team id %s is declared twice; first at teams[%d]" (include "gw.repr" $team.id) (get $teams $team.id))) -}}
{{- end -}}
{{- $_ := set $teams $team.id $i -}}
{{- end -}}
{{- end -}}

{{/* config.GatewayConfig._classes_known: the queue's classes, and every class a team or key names. */}}
{{- define "gw.checkClasses" -}}
{{- $classes := default (list "interactive" "batch") .priorities -}}
{{- if ne (len $classes) (len (uniq $classes)) }}{{ include "gw.refuse" (list "priorities" "a class is listed twice") }}{{ end -}}
{{- $token := (include "gw.registry" . | fromJson).priorityClass -}}
{{- range $i, $name := $classes -}}
{{- if not (regexMatch (printf "^(?:%s)$" $token) $name) -}}
{{- $why := "letters, digits, '_', '.', '-' (up to 64), as the X-Gateway-Priority header names it" -}}
{{- include "gw.refuse" (list (printf "priorities[%d]" $i) (printf "a class is one token of %s, not %s" $why (include "gw.repr" (trunc 64 $name)))) -}}
{{- end -}}
{{- end -}}
{{- $known := join ", " $classes -}}
{{- range $i, $team := .teams -}}
{{- if and (not (kindIs "invalid" $team.priority)) (not (has $team.priority $classes)) -}}
{{- include "gw.refuse" (list (printf "teams[%d].priority" $i) (printf "unknown class %s (known: %s)" (include "gw.repr" $team.priority) $known)) -}}
{{- end -}}
{{- range $j, $key := $team.keys -}}
{{- if and (not (kindIs "invalid" $key.priority)) (not (has $key.priority $classes)) -}}
{{- include "gw.refuse" (list (printf "teams[%d].keys[%d].priority" $i $j) (printf "unknown class %s (known: %s)" (include "gw.repr" $key.priority) $known)) -}}
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
{{- $why := printf "%s is not a plugin feature of provider %s (it takes: %s)" (include "gw.repr" $name) $p (default "nothing" (join ", " $takes)) -}}
{{- include "gw.refuse" (list (printf "%s.extra_features[%d]" $at $j) $why) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* config._someone_can_hold_a_key: with keys required and none in the config, an admin key to issue
     them: a hash in the config, or a Secret that gives it (yours may: the pod then decides). */}}
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
