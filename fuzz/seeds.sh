#!/bin/sh
# fuzz/seeds.sh NAME DIR - builds the seed corpus of fuzz target NAME in DIR from the small
# seeds kept in fuzz/seeds/NAME/, the test fixtures, the shared data (../shared or
# $NX_SHARED) and, where a seed is a generated file, the nexus CLI ($BUILD/nexus: tiny
# random GGUF models, compiled KV blocks). Never needs network or Python.
set -e
name=$1; dir=$2
[ -n "$name" ] && [ -n "$dir" ] || { echo "usage: fuzz/seeds.sh NAME DIR" >&2; exit 2; }
SHARED=${NX_SHARED:-../shared}
NEXUS=${BUILD:-build}/nexus
mkdir -p "$dir"
[ -d "fuzz/seeds/$name" ] && cp fuzz/seeds/"$name"/* "$dir"/ 2>/dev/null || true

# text seeds for a tokenizer target: flag byte (see fuzz/fuzz_tok.h) + each test string of the
# vocabularies' .inp files (llama.cpp's vocab tests: strings separated by __ggml_vocab_test__)
tok_seeds() {
    i=0
    for inp in "$SHARED"/models/vocab/*.inp; do
        [ -f "$inp" ] || continue
        awk -v dir="$dir" -v base="$(basename "$inp" .gguf.inp)" '
            BEGIN { n = 0; s = "" }
            /^__ggml_vocab_test__$/ { f = sprintf("%s/%s-%03d", dir, base, n++); flag = n % 16
                                      printf "%c%s", (flag == 0 ? 8 : flag), s > f; close(f); s = ""; next }
            { s = (s == "" ? $0 : s "\n" $0) }' "$inp"
        i=$((i + 1))
    done
    printf '\010Hello world' > "$dir/plain"
    printf '\002<s>Hi</s><|endoftext|><|begin_of_text|>[CLS] x [SEP]' > "$dir/special"
}

case "$name" in
gguf_model)
    for f in "$SHARED"/models/stories260K/stories260K.gguf "$SHARED"/models/vocab/ggml-vocab-bert-bge.gguf \
             "$SHARED"/models/vocab/ggml-vocab-llama-spm.gguf; do
        [ -f "$f" ] && cp "$f" "$dir"/
    done
    if [ -x "$NEXUS" ]; then
        tiny="--layers 1 --embd 32 --heads 2 --ff 64 --vocab 260 --ctx 64"
        for t in f32 f16 bf16 q8_0 q4_0; do
            "$NEXUS" mkmodel -o "$dir/tiny-llama-$t.gguf" $tiny --heads-kv 1 --type $t >/dev/null 2>&1 || true
        done
        "$NEXUS" mkmodel -o "$dir/tiny-qwen2.gguf" --arch qwen2 $tiny --heads-kv 1 >/dev/null 2>&1 || true
        "$NEXUS" mkmodel -o "$dir/tiny-qwen3.gguf" --arch qwen3 $tiny --heads-kv 1 >/dev/null 2>&1 || true
        "$NEXUS" mkmodel -o "$dir/tiny-bert.gguf" --arch bert $tiny --vocab 240 >/dev/null 2>&1 || true
        "$NEXUS" mkmodel -o "$dir/tiny-nomic.gguf" --arch nomic-bert $tiny --vocab 240 >/dev/null 2>&1 || true
        "$NEXUS" mkmodel -o "$dir/tiny-q4k.gguf" --layers 1 --embd 256 --heads 2 --ff 256 --vocab 260 \
            --type q4_k_m >/dev/null 2>&1 || true
    fi ;;
tok_*) tok_seeds ;;
hftok_encode)
    tok_seeds
    for f in "$dir"/*; do tail -c +2 "$f" > "$f.t" && mv "$f.t" "$f"; done ;;
hftok_json) ;; # small tokenizer.json files kept in fuzz/seeds/hftok_json
safetensors|model2vec) ;; # kept in fuzz/seeds/
kvblock)
    if [ -x "$NEXUS" ] && [ -f "$SHARED/models/stories260K/stories260K.gguf" ]; then
        m="$SHARED/models/stories260K/stories260K.gguf"
        "$NEXUS" kv compile -m "$m" --text "Once upon a time" -o "$dir/block-f16.kvb" >/dev/null 2>&1 || true
        "$NEXUS" kv compile -m "$m" --text "a cat" --f32 -o "$dir/block-f32.kvb" >/dev/null 2>&1 || true
        "$NEXUS" kv compile -m "$m" --text "there was" --m0 7 --prefix "Lily said" \
            -o "$dir/block-m0.kvb" >/dev/null 2>&1 || true
    fi ;;
mcp_client) ;; # transcripts kept in fuzz/seeds/mcp_client
mcp_config)
    cp tests/fixtures/mcp/servers.json "$dir"/ ;;
registry)
    for f in tests/fixtures/route/*.json tests/fixtures/route/*.jsonl; do
        [ -f "$f" ] && [ "$(wc -c < "$f")" -le 65536 ] && cp "$f" "$dir"/
    done
    # the MCP snapshots and BFCL pools are larger than the input limit: their first lines
    for f in "$SHARED"/data/bfcl/BFCL_v4_*.json; do
        [ -f "$f" ] && head -n 20 "$f" > "$dir/$(basename "$f" .json)-head.jsonl"
    done
    for f in "$SHARED"/data/mcp/server-*.json; do
        [ -f "$f" ] && [ "$(wc -c < "$f")" -le 65536 ] && cp "$f" "$dir"/
    done ;;
schema_grammar) ;; # schemas kept in fuzz/seeds/schema_grammar
gbnf) ;; # grammars kept in fuzz/seeds/gbnf
jinja)
    # every shared chat template (those up to 32 KB) with a conversation that has a tool call
    conv='[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather?"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","content":"18C"},{"role":"user","content":"Thanks"}]'
    tools='[{"type":"function","function":{"name":"get_weather","description":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
    for f in "$SHARED"/data/chat-templates/*.jinja; do
        [ -f "$f" ] && [ "$(wc -c < "$f")" -le 32768 ] || continue
        { cat "$f"; printf '\000%s\000%s' "$conv" "$tools"; } > "$dir/$(basename "$f" .jinja)"
    done ;;
server_request) ;; # request bodies kept in fuzz/seeds/server_request
*) echo "fuzz/seeds.sh: unknown target '$name'" >&2; exit 2 ;;
esac
exit 0
