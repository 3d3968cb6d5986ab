{{/* .Values.config as pydantic validates it: against the shapes of the gateway's config models (types,
     bounds, choices, required and unknown keys), which `llm-gateway config-schema --chart` writes into
     _gateway.tpl as "gw.shapes" (gateway/runtime/shapes.py), with the models' validators
     ("gw.rule.*", _config_check.tpl) run where pydantic runs them. A mistake fails the render with the
     line check-config prints, "config" for the file's name: pydantic's first error (an unknown key
     before any other), in pydantic's words and check-config's key path. tests/unit/test_helm_config.py
     compares the two for every field, and for configs with two mistakes. Helm's own values.schema.json
     leaves the config's shapes to this check; the loader's checks after pydantic's (names, prices,
     providers, the key holder) follow in _config_check.tpl, on a config of the right shape. */}}
{{- define "gw.checkShape" -}}
{{- with include "gw.shapeProblem" .Values.config }}{{ fail (printf "config: %s" .) }}{{ end -}}
{{- end -}}

{{/* A config's first mistake as pydantic finds it, as "<where>: <why>"; nothing when it has none. */}}
{{- define "gw.shapeProblem" -}}
{{- if kindIs "invalid" . -}}
(top level): the file is empty: give at least 'models' (docs/configuration.md)
{{- else if kindIs "slice" . -}}
(top level): must be a mapping of keys (models, teams, ...), not a list
{{- else if not (kindIs "map" .) -}}
(top level): must be a mapping of keys (models, teams, ...), not a single value ({{ include "gw.repr" . | trunc 40 }})
{{- else -}}
{{- $shapes := include "gw.shapes" . | fromJson -}}
{{- $found := include "gw.shape" (dict "v" . "s" $shapes.root "at" "" "sh" $shapes) -}}
{{- if $found -}}
{{- $problems := splitList "\x1e" (trimSuffix "\x1e" $found) -}}
{{- $first := first $problems -}}
{{- range $problems }}{{ if hasPrefix "x" . }}{{ $first = . }}{{ break }}{{ end }}{{ end -}}
{{- substr 1 -1 $first -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* (list kind at why): one problem, "x" (an unknown key) or "e", ended by a record separator. */}}
{{- define "gw.problem" -}}{{ index . 0 }}{{ index . 1 | default "(top level)" }}: {{ index . 2 }}{{ "\x1e" }}{{- end -}}

{{/* (list at key): the key path of a mapping's key, as check-config writes it. */}}
{{- define "gw.child" -}}{{ if index . 0 }}{{ index . 0 }}.{{ end }}{{ index . 1 }}{{- end -}}

{{/* (dict "v" value "s" shape "at" path "sh" shapes): each problem of the value, in pydantic's order. */}}
{{- define "gw.shape" -}}
{{- $v := .v -}}
{{- $s := .s -}}
{{- if eq $s.t "model" -}}{{ include "gw.shapeModel" . }}
{{- else if eq $s.t "null" -}}{{ if not (kindIs "invalid" $v) }}{{ include "gw.shape" (dict "v" $v "s" $s.of "at" .at "sh" .sh) }}{{ end }}
{{- else if eq $s.t "union" -}}{{ include "gw.shapeUnion" . }}
{{- else if eq $s.t "list" -}}{{ include "gw.shapeList" . }}
{{- else if eq $s.t "dict" -}}{{ include "gw.shapeDict" . }}
{{- else if eq $s.t "lit" -}}
{{- if not (and (kindIs "string" $v) (has $v $s.of)) }}{{ include "gw.problem" (list "e" .at $s.msg) }}{{ end -}}
{{- else if eq $s.t "str" -}}{{ include "gw.shapeStr" . }}
{{- else if ne $s.t "any" -}}
{{- $n := include (printf "gw.number.%s" $s.t) $v -}}
{{- if hasPrefix "!" $n }}{{ include "gw.problem" (list "e" .at (substr 1 -1 $n)) }}
{{- else if not (or (eq $s.t "bool") (eq $n "?")) -}}
{{- $n = float64 $n -}}
{{- range $s.bounds -}}
{{- $op := index . 0 -}}
{{- $b := float64 (index . 1) -}}
{{- $ok := dict "le" (le $n $b) "lt" (lt $n $b) "ge" (ge $n $b) "gt" (gt $n $b) -}}
{{- if not (get $ok $op) -}}
{{- $words := dict "le" "less than or equal to" "lt" "less than" "ge" "greater than or equal to" "gt" "greater than" -}}
{{- include "gw.problem" (list "e" $.at (printf "must be %s %s" (get $words $op) (index . 2))) -}}{{ break -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A section: its fields in order (a missing one "required"), each field's validator once its value
     is of the right shape, the keys it does not know; then, if all that found nothing, the section's
     own validator. */}}
{{- define "gw.shapeModel" -}}
{{- if not (kindIs "map" .v) -}}{{ include "gw.problem" (list "e" .at "must be a mapping (key: value)") }}
{{- else -}}
{{- $fields := get .sh.models .s.ref -}}
{{- $known := dict -}}
{{- $out := "" -}}
{{- range $fields -}}
{{- $name := index . 0 -}}
{{- $_ := set $known $name true -}}
{{- $at := include "gw.child" (list $.at $name) -}}
{{- if hasKey $.v $name -}}
{{- $found := include "gw.shape" (dict "v" (get $.v $name) "s" (index . 1) "at" $at "sh" $.sh) -}}
{{- $rule := printf "%s.%s" $.s.ref $name -}}
{{- if and (not $found) (has $rule $.sh.rules) -}}
{{- $found = include "gw.firstProblem" (include (printf "gw.rule.%s" $rule) (dict "v" (get $.v $name) "at" $at)) -}}
{{- end -}}
{{- $out = print $out $found -}}
{{- else if index . 2 -}}{{ $out = print $out (include "gw.problem" (list "e" $at "required")) }}
{{- end -}}
{{- end -}}
{{- range $key, $_ := .v -}}
{{- if not (hasKey $known $key) -}}
{{- $out = print $out (include "gw.problem" (list "x" (include "gw.child" (list $.at $key)) (include "gw.unknownKey" (list $key $fields)))) -}}
{{- end -}}
{{- end -}}
{{- if and (not $out) (has .s.ref .sh.rules) -}}
{{- $out = include "gw.firstProblem" (include (printf "gw.rule.%s" .s.ref) (dict "v" .v "at" .at)) -}}
{{- end -}}
{{- $out -}}
{{- end -}}
{{- end -}}

{{/* The first of some problems: the one a validator raises. */}}
{{- define "gw.firstProblem" -}}{{ with . }}{{ first (splitList "\x1e" .) }}{{ "\x1e" }}{{ end }}{{- end -}}

{{/* A value of one of several shapes: the first shape's problems when it fits none. */}}
{{- define "gw.shapeUnion" -}}
{{- $first := "" -}}
{{- $fits := false -}}
{{- range .s.of -}}
{{- $found := include "gw.shape" (dict "v" $.v "s" . "at" $.at "sh" $.sh) -}}
{{- if not $found }}{{ $fits = true }}{{ else if not $first }}{{ $first = $found }}{{ end -}}
{{- end -}}
{{- if not $fits }}{{ $first }}{{ end -}}
{{- end -}}

{{- define "gw.shapeList" -}}
{{- if not (kindIs "slice" .v) -}}{{ include "gw.problem" (list "e" .at "must be a list") }}
{{- else -}}
{{- range $i, $item := .v -}}
{{- include "gw.shape" (dict "v" $item "s" $.s.item "at" (printf "%s%s" $.at (include "gw.at" (list $item $i))) "sh" $.sh) -}}
{{- end -}}
{{- $min := int (default 0 .s.min) -}}
{{- if lt (len .v) $min -}}
{{- include "gw.problem" (list "e" .at (printf "must list at least %d item%s" $min (ternary "" "s" (eq $min 1)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A mapping: each entry's key, then its value, in the keys' order. */}}
{{- define "gw.shapeDict" -}}
{{- if not (kindIs "map" .v) -}}{{ include "gw.problem" (list "e" .at "must be a mapping (key: value)") }}
{{- else -}}
{{- range $key, $value := .v -}}
{{- $at := include "gw.child" (list $.at $key) -}}
{{- include "gw.shape" (dict "v" $key "s" $.s.key "at" $at "sh" $.sh) -}}
{{- include "gw.shape" (dict "v" $value "s" $.s.value "at" $at "sh" $.sh) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A string, its length counted in characters as Python counts them. */}}
{{- define "gw.shapeStr" -}}
{{- if not (kindIs "string" .v) -}}{{ include "gw.problem" (list "e" .at "must be a valid string") }}
{{- else -}}
{{- $n := len (splitList "" .v) -}}
{{- if and (hasKey .s "min") (lt $n (int .s.min)) -}}
{{- include "gw.problem" (list "e" .at (printf "String should have at least %d character%s" (int .s.min) (ternary "" "s" (eq (int .s.min) 1)))) -}}
{{- else if and (hasKey .s "max") (gt $n (int .s.max)) -}}
{{- include "gw.problem" (list "e" .at (printf "String should have at most %d character%s" (int .s.max) (ternary "" "s" (eq (int .s.max) 1)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Numbers as pydantic reads them in its lax mode: the value as text, or "!" and why not. A number
     from YAML reaches Helm as a float: one with no fraction is the integer the pod's file holds. */}}
{{- define "gw.number.int" -}}
{{- if kindIs "bool" . }}{{ ternary 1 0 . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- if eq (float64 .) (floor .) }}{{ . }}{{ else }}!must be a valid integer, got a number with a fractional part{{ end -}}
{{- else if kindIs "string" . -}}
{{- $t := include "gw.strip" . -}}
{{- if and (regexMatch "^[+-]?[0-9]+(_[0-9]+)*(\\.0+)?$" $t) }}{{ regexReplaceAll "\\.0+$" (replace "_" "" $t) "" }}
{{- else }}!must be a valid integer, unable to parse string as an integer{{ end -}}
{{- else }}!must be a valid integer{{ end -}}
{{- end -}}

{{- define "gw.number.float" -}}
{{- if kindIs "bool" . }}{{ ternary 1 0 . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}{{ . }}
{{- else if kindIs "string" . -}}
{{- $t := include "gw.strip" . -}}
{{- if and (include "gw.underscores" $t) (regexMatch "^(?i)[+-]?(([0-9]+\\.?[0-9]*|\\.[0-9]+)(e[+-]?[0-9]+)?|inf|infinity|nan)$" (replace "_" "" $t)) -}}
{{- replace "_" "" $t -}}
{{- else }}!must be a valid number, unable to parse string as a number{{ end -}}
{{- else }}!must be a valid number{{ end -}}
{{- end -}}

{{- define "gw.number.decimal" -}}
{{- if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) }}{{ . }}
{{- else if kindIs "string" . -}}
{{- $t := include "gw.strip" . -}}
{{- $digits := "[0-9\\p{Nd}]+(_[0-9\\p{Nd}]+)*" -}}
{{- if regexMatch "^(?i)[+-]?(inf|infinity|s?nan[0-9]*)$" $t }}!must be a finite number
{{- else if regexMatch (printf "^(?i)[+-]?(%s(\\.(%s)?)?|\\.%s)(e[+-]?%s)?$" $digits $digits $digits $digits) $t -}}
{{- if regexMatch "^[-+0-9._eE]*$" $t }}{{ replace "_" "" $t }}{{ else }}?{{ end -}}{{/* digits Go does not read: bounds unchecked */}}
{{- else }}!must be a valid decimal{{ end -}}
{{- else }}!Decimal input should be an integer, float, string or Decimal object{{ end -}}
{{- end -}}

{{- define "gw.number.bool" -}}
{{- if kindIs "bool" . }}{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int64" .) (kindIs "int" .) -}}
{{- if ne (float64 .) (floor .) }}!must be a valid boolean
{{- else if not (has (int64 .) (list (int64 0) (int64 1))) }}!must be a valid boolean, unable to interpret input
{{- else }}{{ . }}{{ end -}}
{{- else if kindIs "string" . -}}
{{- if not (has (lower .) (list "0" "off" "f" "false" "n" "no" "1" "on" "t" "true" "y" "yes")) }}!must be a valid boolean, unable to interpret input{{ end -}}
{{- else }}!must be a valid boolean{{ end -}}
{{- end -}}

{{/* A number's text without the white space around it (Unicode's, as pydantic strips it). */}}
{{- define "gw.strip" -}}{{ regexReplaceAll "^[\\s\\p{Z}\\x{85}]+|[\\s\\p{Z}\\x{85}]+$" . "" }}{{- end -}}

{{/* Whether the underscores in a number's text sit between digits, once each: "true" or "". */}}
{{- define "gw.underscores" -}}{{ if not (or (hasPrefix "_" .) (hasSuffix "_" .) (contains "__" .)) }}true{{ end }}{{- end -}}

{{/* (list key fields): check-config's words for a key its section does not know: the known keys
     difflib.get_close_matches(key, known, n=3, cutoff=0.6) picks, or every known key. */}}
{{- define "gw.unknownKey" -}}
{{- $word := splitList "" (index . 0) -}}
{{- $known := list -}}
{{- $scored := list -}}
{{- range index . 1 -}}
{{- $name := index . 0 -}}
{{- $known = append $known $name -}}
{{- $a := splitList "" $name -}}
{{- $m := atoi (include "gw.matches" (list $a $word 0 (len $a) 0 (len $word))) -}}
{{- $ratio := divf (mulf 2.0 $m) (add (len $a) (len $word)) -}}
{{- if ge $ratio 0.6 }}{{ $scored = append $scored (printf "%.17f\x00%s" $ratio $name) }}{{ end -}}
{{- end -}}
{{- if $scored -}}
{{- $near := list -}}
{{- range $i, $s := sortAlpha $scored | reverse }}{{ if lt $i 3 }}{{ $near = append $near (printf "'%s'" (last (splitList "\x00" $s))) }}{{ end }}{{ end -}}
unknown key; did you mean {{ join " or " $near }}?
{{- else -}}
unknown key (known here: {{ join ", " $known }})
{{- end -}}
{{- end -}}

{{/* (list a b alo ahi blo bhi): how many characters difflib.SequenceMatcher(None, a, b) matches in
     these bounds: the longest common block (the first one by its end in a, then in b), then the
     matches left and right of it. */}}
{{- define "gw.matches" -}}
{{- $a := index . 0 }}{{ $b := index . 1 -}}
{{- $alo := int (index . 2) }}{{ $ahi := int (index . 3) }}{{ $blo := int (index . 4) }}{{ $bhi := int (index . 5) -}}
{{- $best := list 0 0 0 -}}
{{- $prev := dict -}}
{{- range $i := untilStep $alo $ahi 1 -}}
{{- $row := dict -}}
{{- range $j := untilStep $blo $bhi 1 -}}
{{- if eq (index $a $i) (index $b $j) -}}
{{- $k := add1 (get $prev (toString (sub $j 1)) | default 0) -}}
{{- $_ := set $row (toString $j) $k -}}
{{- if gt $k (index $best 2) }}{{ $best = list (add (sub $i $k) 1) (add (sub $j $k) 1) $k }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $prev = $row -}}
{{- end -}}
{{- $k := index $best 2 -}}
{{- if gt $k 0 -}}
{{- $i := int (index $best 0) }}{{ $j := int (index $best 1) -}}
{{- $left := atoi (include "gw.matches" (list $a $b $alo $i $blo $j)) -}}
{{- $right := atoi (include "gw.matches" (list $a $b (add $i $k) $ahi (add $j $k) $bhi)) -}}
{{- add $k $left $right -}}
{{- else }}0{{ end -}}
{{- end -}}
