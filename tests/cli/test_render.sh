#!/usr/bin/env bash
# test_render.sh — `cinfer render` end to end: every fixture template against jinja2's
# expected_renders.json (byte-exact, output compared as files so a trailing newline would
# show), the repo's tool/thinking conversations through --tools/--kwargs/--date, every
# MODEL kind (bare .jinja with --bos/--eos, tokenizer_config.json with a list of named
# templates, HF dir with chat_template.jinja, real GGUF models when models/ has them), the
# --chat-template override, and error exits (raise_exception -> 1, usage -> 2).
set -u
BIN=${CINFER_BIN:-./build/cinfer}
FIX=${CINFER_FIXTURES:-tests/data/fixtures}
SRC=${CINFER_SRC:-.}
CT=$FIX/chat-templates
pass=0; fail=0
ok()   { pass=$((pass+1)); }
bad()  { fail=$((fail+1)); echo "FAIL $*" >&2; }
check() { if [ "$2" == "$3" ]; then ok; else bad "$1: expected [$2] got [$3]"; fi; }
same_file() { if cmp -s "$2" "$3"; then ok; else bad "$1: output differs"; diff <(od -c "$2" | head -20) <(od -c "$3" | head -20) >&2; fi; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
EXP=$CT/expected_renders.json

# 1. all fixture templates x cases through the CLI
n=0
for tname in $(jq -r '.renders | keys[]' "$EXP"); do
  bos=$(jq -r --arg t "$tname" '.special_tokens[$t].bos_token' "$EXP")
  eos=$(jq -r --arg t "$tname" '.special_tokens[$t].eos_token' "$EXP")
  for i in $(seq 0 4); do
    cname=$(jq -r ".cases[$i].name" "$EXP")
    jq ".cases[$i] | {messages}" "$EXP" > "$tmp/msgs.json"
    agp=$(jq -r ".cases[$i].add_generation_prompt" "$EXP")
    flag=(); [ "$agp" == "true" ] && flag=(--add-generation-prompt)
    "$BIN" render "$CT/$tname" --messages "$tmp/msgs.json" "${flag[@]}" --bos "$bos" --eos "$eos" \
      --date 2024-07-26 > "$tmp/out.txt" 2> "$tmp/err.txt"
    rc=$?
    if [ "$(jq -r --arg t "$tname" --arg c "$cname" '.renders[$t][$c].ok' "$EXP")" == "true" ]; then
      jq -j --arg t "$tname" --arg c "$cname" '.renders[$t][$c].text' "$EXP" > "$tmp/want.txt"
      check "rc $tname/$cname" 0 "$rc"
      same_file "$tname/$cname" "$tmp/want.txt" "$tmp/out.txt"
    else
      want=$(jq -r --arg t "$tname" --arg c "$cname" '.renders[$t][$c].error' "$EXP")
      check "rc $tname/$cname" 1 "$rc"
      check "error $tname/$cname" "cinfer render: $want" "$(cat "$tmp/err.txt")"
    fi
    n=$((n+1))
  done
done
check fixture_count 95 "$n"

# 2. repo conversations with tools / thinking flags, against the jinja2 reference renders
E2=$SRC/tests/data/template/expected.json
for sel in 'tools_weather/gen' 'thinking/gen_think_off' 'thinking/gen_think_on' 'tool_calls_parallel/gen' 'long_chat/nogen'; do
  for t in fixtures/chat-templates/Qwen-Qwen3-0.6B.jinja fixtures/chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja fixtures/chat-templates/openai-gpt-oss-120b.jinja; do
    q=".cases[] | select(.template == \"$t\" and .name == \"$sel\")"
    jq "$q | .context | {messages}" "$E2" > "$tmp/m.json"
    jq "$q | .context.tools" "$E2" > "$tmp/tools.json"
    jq -c "$q | .context | del(.messages, .tools, .add_generation_prompt, .bos_token, .eos_token, .documents)" "$E2" > "$tmp/kw.json"
    args=(--messages "$tmp/m.json" --kwargs "$(cat "$tmp/kw.json")" --date "$(jq -r "$q | .date" "$E2")")
    [ "$(jq -r "$q | .context.tools" "$E2")" != "null" ] && args+=(--tools "$tmp/tools.json")
    [ "$(jq -r "$q | .context.add_generation_prompt" "$E2")" == "true" ] && args+=(--add-generation-prompt)
    args+=(--bos "$(jq -r "$q | .context.bos_token // empty" "$E2")" --eos "$(jq -r "$q | .context.eos_token // empty" "$E2")")
    "$BIN" render "$FIX/${t#fixtures/}" "${args[@]}" > "$tmp/out.txt" 2> "$tmp/err.txt"
    rc=$?
    if [ "$(jq -r "$q | .ok" "$E2")" == "true" ]; then
      jq -j "$q | .text" "$E2" > "$tmp/want.txt"
      check "rc $t $sel" 0 "$rc"
      same_file "$t $sel" "$tmp/want.txt" "$tmp/out.txt"
    else
      check "rc $t $sel (expected error)" 1 "$rc"
    fi
  done
done

# 3. MODEL kinds
printf '[{"role":"user","content":"hi"}]' > "$tmp/u.json"
printf '{%% for m in messages %%}[{{ m.role }}:{{ m.content }}]{%% endfor %%}{{ bos_token }}|{{ eos_token }}' > "$tmp/t.jinja"
check bare_jinja "[user:hi]B|E" "$("$BIN" render "$tmp/t.jinja" --messages "$tmp/u.json" --bos B --eos E)"
check bare_jinja_no_tokens "[user:hi]|" "$("$BIN" render "$tmp/t.jinja" --messages "$tmp/u.json")"
cat > "$tmp/tokenizer_config.json" <<'EOF'
{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
 "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"},
                   {"name": "tool_use", "template": "T{{ tools | length }}"}]}
EOF
check config_default "D<s>hi</s>" "$("$BIN" render "$tmp/tokenizer_config.json" --messages "$tmp/u.json")"
check config_named "T1" "$(printf '[{"type":"function"}]' > "$tmp/tl.json"; "$BIN" render "$tmp/tokenizer_config.json" --template-name tool_use --messages "$tmp/u.json" --tools "$tmp/tl.json")"
mkdir -p "$tmp/hf"; cp "$tmp/tokenizer_config.json" "$tmp/hf/"; printf 'J{{ messages|length }}' > "$tmp/hf/chat_template.jinja"
check hf_dir_jinja_wins "J1" "$("$BIN" render "$tmp/hf" --messages "$tmp/u.json")"
check override "[user:hi]<s>|</s>" "$("$BIN" render "$tmp/hf" --chat-template "$tmp/t.jinja" --messages "$tmp/u.json")"
check messages_object "[user:hi]|" "$(printf '{"messages":[{"role":"user","content":"hi"}]}' > "$tmp/o.json"; "$BIN" render "$tmp/t.jinja" --messages "$tmp/o.json")"
printf '{{ strftime_now("%%Y-%%m-%%d %%b") }}' > "$tmp/d.jinja"
check date_flag "2024-02-29 Feb" "$("$BIN" render "$tmp/d.jinja" --messages "$tmp/u.json" --date 2024-02-29)"
check tools_default_none "none" "$(printf '{{ "none" if tools is none else "set" }}' > "$tmp/n.jinja"; "$BIN" render "$tmp/n.jinja" --messages "$tmp/u.json")"
check kwargs_flag "False" "$(printf '{{ enable_thinking }}' > "$tmp/k.jinja"; "$BIN" render "$tmp/k.jinja" --messages "$tmp/u.json" --kwargs '{"enable_thinking": false}')"
check stdin_messages "[user:hi]|" "$("$BIN" render "$tmp/t.jinja" --messages - < "$tmp/u.json")"

# 4. real GGUF models (fetched by scripts/fetch_models.sh); skipped when absent
for g in "$SRC"/models/*.gguf; do
  [ -f "$g" ] || continue
  stem=$(basename "$g" .gguf)
  ref=$SRC/tests/data/template/gguf/$stem.jinja
  if [ -f "$ref" ]; then
    q=".cases[] | select(.template == \"tests/data/template/gguf/$stem.jinja\" and .name == \"tools_weather/gen\")"
    jq "$q | .context | {messages}" "$E2" > "$tmp/m.json"
    jq "$q | .context.tools" "$E2" > "$tmp/tools.json"
    jq -j "$q | .text" "$E2" > "$tmp/want.txt"
    "$BIN" render "$g" --messages "$tmp/m.json" --tools "$tmp/tools.json" --add-generation-prompt --date 2025-01-15 > "$tmp/out.txt"
    check "rc gguf $stem" 0 "$?"
    same_file "gguf $stem" "$tmp/want.txt" "$tmp/out.txt"
  else
    "$BIN" render "$g" --messages "$tmp/u.json" > /dev/null 2> "$tmp/err.txt"
    check "gguf $stem without template" 1 "$?"
  fi
done

# 5. errors and usage
printf '{{ raise_exception("nope: " ~ messages|length) }}' > "$tmp/r.jinja"
"$BIN" render "$tmp/r.jinja" --messages "$tmp/u.json" > "$tmp/out.txt" 2> "$tmp/err.txt"
check raise_rc 1 "$?"
check raise_msg "cinfer render: nope: 1" "$(cat "$tmp/err.txt")"
check raise_no_stdout "" "$(cat "$tmp/out.txt")"
printf '{{ 1 | nosuch }}' > "$tmp/f.jinja"
"$BIN" render "$tmp/f.jinja" --messages "$tmp/u.json" > /dev/null 2> "$tmp/err.txt"
check unknown_filter_rc 1 "$?"
grep -q "No filter named 'nosuch'" "$tmp/err.txt" && ok || bad "unknown filter message: $(cat "$tmp/err.txt")"
printf '{%% if x %%}' > "$tmp/s.jinja"
"$BIN" render "$tmp/s.jinja" --messages "$tmp/u.json" > /dev/null 2> "$tmp/err.txt"
check syntax_rc 1 "$?"
grep -q "syntax error" "$tmp/err.txt" && ok || bad "syntax error message: $(cat "$tmp/err.txt")"
printf '{%% for i in range(100000) %%}{%% for j in range(100000) %%}{%% endfor %%}{%% endfor %%}' > "$tmp/inf.jinja"
"$BIN" render "$tmp/inf.jinja" --messages "$tmp/u.json" > /dev/null 2> "$tmp/err.txt"
check step_limit_rc 1 "$?"
"$BIN" render --help > "$tmp/out.txt"
check help_rc 0 "$?"
grep -q -- "--messages" "$tmp/out.txt" && ok || bad "help text"
"$BIN" render "$tmp/t.jinja" > /dev/null 2>&1
check no_messages_rc 2 "$?"
"$BIN" render "$tmp/t.jinja" --messages "$tmp/u.json" --bogus > /dev/null 2>&1
check bad_option_rc 2 "$?"
"$BIN" render "$tmp/t.jinja" --messages "$tmp/u.json" --date 2024-13-01 > /dev/null 2>&1
check bad_date_rc 2 "$?"
"$BIN" render "$tmp/t.jinja" --messages "$tmp/u.json" --kwargs '[1]' > /dev/null 2>&1
check bad_kwargs_rc 1 "$?"
"$BIN" render "$tmp/nonexistent.jinja" --messages "$tmp/u.json" > /dev/null 2>&1
check missing_model_rc 1 "$?"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
