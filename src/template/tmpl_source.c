/* tmpl_source.c — finds a model's chat template text.
 *
 * Sources, in the order a path is recognised: a GGUF file (tokenizer.chat_template, or
 * tokenizer.chat_template.<name>), a bare .jinja file, a tokenizer_config.json (its
 * chat_template: a string, or a list of {name, template} where "default" is picked unless a
 * name is asked for), a chat_template.json ({"chat_template": ...}), or a Hugging Face model
 * directory (chat_template.jinja, then chat_template.json, then tokenizer_config.json).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "template/tmpl.h"
#include "util/fs.h"

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static char *dup_n(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = 0;
    }
    return s;
}

static int from_gguf(const char *path, const char *name, char **src, struct cerr *e)
{
    struct gguf *g;
    int rc = gguf_open(&g, path, e);
    if (rc)
        return rc;
    char key[256];
    if (name && strcmp(name, "default") != 0)
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", name);
    else
        snprintf(key, sizeof key, "tokenizer.chat_template");
    struct gguf_str s;
    rc = gguf_get_str(g, key, &s, e);
    if (rc == GGUF_ABSENT) {
        gguf_close(g);
        return cerr_set(e, CERR_FORMAT, "%s: no chat template (key %s is absent)", path, key);
    }
    if (rc) {
        gguf_close(g);
        return rc;
    }
    *src = dup_n(s.ptr, (size_t)s.len);
    gguf_close(g);
    return *src ? 0 : cerr_set(e, CERR_NOMEM, "out of memory");
}

/* chat_template value of a parsed tokenizer_config.json / chat_template.json. */
static int from_json_value(const json_t *ct, const char *path, const char *name, char **src,
                           struct cerr *e)
{
    if (json_is_string(ct)) {
        if (name && strcmp(name, "default") != 0)
            return cerr_set(e, CERR_INVALID, "%s: has a single chat template, not one named '%s'",
                            path, name);
        *src = dup_n(json_string_value(ct), json_string_length(ct));
        return *src ? 0 : cerr_set(e, CERR_NOMEM, "out of memory");
    }
    if (json_is_array(ct)) {
        const char *want = name ? name : "default";
        size_t i;
        json_t *it;
        json_array_foreach(ct, i, it) {
            const char *nm = json_string_value(json_object_get(it, "name"));
            json_t *tv = json_object_get(it, "template");
            if (nm && json_is_string(tv) && strcmp(nm, want) == 0) {
                *src = dup_n(json_string_value(tv), json_string_length(tv));
                return *src ? 0 : cerr_set(e, CERR_NOMEM, "out of memory");
            }
        }
        return cerr_set(e, CERR_INVALID, "%s: no chat template named '%s'", path, want);
    }
    return cerr_set(e, CERR_FORMAT, "%s: chat_template is missing or not a string/list", path);
}

static int from_json_file(const char *path, const char *name, char **src, struct cerr *e)
{
    json_error_t je;
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    if (!j)
        return cerr_set(e, CERR_FORMAT, "%s: line %d: %s", path, je.line, je.text);
    int rc = from_json_value(json_object_get(j, "chat_template"), path, name, src, e);
    json_decref(j);
    return rc;
}

int tmpl_source_load(const char *model_path, const char *name, char **src, struct cerr *e)
{
    *src = NULL;
    if (!model_path)
        return cerr_set(e, CERR_INVALID, "no model path given");
    if (fs_is_dir(model_path)) {
        char p[1024];
        if (fs_join(p, sizeof p, model_path, "chat_template.jinja") == 0 && fs_exists(p) &&
            (!name || !strcmp(name, "default"))) {
            size_t n;
            return fs_read_all(p, src, &n, e);
        }
        if (fs_join(p, sizeof p, model_path, "chat_template.json") == 0 && fs_exists(p))
            return from_json_file(p, name, src, e);
        if (fs_join(p, sizeof p, model_path, "tokenizer_config.json") == 0 && fs_exists(p))
            return from_json_file(p, name, src, e);
        return cerr_set(e, CERR_IO, "%s: no chat_template.jinja or tokenizer_config.json",
                        model_path);
    }
    if (!fs_exists(model_path))
        return cerr_set(e, CERR_IO, "%s: no such file", model_path);
    if (ends_with(model_path, ".gguf"))
        return from_gguf(model_path, name, src, e);
    if (ends_with(model_path, ".json"))
        return from_json_file(model_path, name, src, e);
    /* a .jinja (or any other text) file is the template itself, unless it is a GGUF */
    FILE *f = fopen(model_path, "rb");
    char magic[4] = {0};
    if (f) {
        size_t got = fread(magic, 1, 4, f);
        fclose(f);
        if (got == 4 && memcmp(magic, "GGUF", 4) == 0)
            return from_gguf(model_path, name, src, e);
    }
    size_t n;
    return fs_read_all(model_path, src, &n, e);
}

static char *gguf_token_text(const struct gguf *g, const char *id_key)
{
    int64_t id;
    const struct gguf_kv *toks;
    if (gguf_get_int(g, id_key, &id, NULL) != 0)
        return NULL;
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, NULL) != 0 || toks->arr_type != GGUF_STRING)
        return NULL;
    if (id < 0 || (uint64_t)id >= toks->arr_n)
        return NULL;
    struct gguf_str s = gguf_arr_str(toks, (uint64_t)id);
    return dup_n(s.ptr, (size_t)s.len);
}

static char *json_token_text(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!json_is_string(v))
        return NULL;
    return dup_n(json_string_value(v), json_string_length(v));
}

int tmpl_special_tokens(const char *model_path, char **bos, char **eos, struct cerr *e)
{
    *bos = *eos = NULL;
    if (!model_path)
        return cerr_set(e, CERR_INVALID, "no model path given");
    char p[1024];
    const char *cfg = NULL;
    if (fs_is_dir(model_path)) {
        if (fs_join(p, sizeof p, model_path, "tokenizer_config.json") == 0 && fs_exists(p))
            cfg = p;
    } else if (ends_with(model_path, "tokenizer_config.json")) {
        cfg = model_path;
    } else if (!ends_with(model_path, ".jinja") && fs_exists(model_path)) {
        FILE *f = fopen(model_path, "rb");
        char magic[4] = {0};
        size_t got = 0;
        if (f) {
            got = fread(magic, 1, 4, f);
            fclose(f);
        }
        if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
            struct gguf *g;
            int rc = gguf_open(&g, model_path, e);
            if (rc)
                return rc;
            *bos = gguf_token_text(g, "tokenizer.ggml.bos_token_id");
            *eos = gguf_token_text(g, "tokenizer.ggml.eos_token_id");
            gguf_close(g);
        }
        return 0;
    }
    if (!cfg)
        return 0;
    json_error_t je;
    json_t *j = json_load_file(cfg, JSON_DECODE_INT_AS_REAL, &je);
    if (!j)
        return cerr_set(e, CERR_FORMAT, "%s: line %d: %s", cfg, je.line, je.text);
    *bos = json_token_text(json_object_get(j, "bos_token"));
    *eos = json_token_text(json_object_get(j, "eos_token"));
    json_decref(j);
    return 0;
}
