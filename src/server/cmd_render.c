/* cmd_render.c — `cinfer render MODEL --messages FILE.json ...`: print a rendered prompt.
 *
 * Builds the template context the way transformers' apply_chat_template does (messages,
 * tools (None when absent), documents (None), add_generation_prompt, bos_token/eos_token
 * from the model, then any --kwargs), renders the model's chat template (or the
 * --chat-template FILE override) and writes the text to stdout exactly, with no newline
 * added. A template error goes to stderr and exits 1.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/commands.h"
#include "template/tmpl.h"
#include "util/fs.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cinfer render MODEL --messages FILE.json [options]\n"
            "\n"
            "Renders MODEL's chat template for a conversation and prints the prompt exactly\n"
            "(no trailing newline is added). MODEL is a .gguf file, a Hugging Face model\n"
            "directory (chat_template.jinja or tokenizer_config.json), a tokenizer_config.json,\n"
            "or a bare .jinja template file.\n"
            "\n"
            "options:\n"
            "  --messages FILE        JSON array of messages, or an object whose keys become\n"
            "                         template variables (messages, tools, ...); '-' = stdin\n"
            "  --tools FILE           JSON array of tool definitions (default: tools = None)\n"
            "  --add-generation-prompt  end with the assistant turn header\n"
            "  --kwargs JSON          extra template variables, e.g. '{\"enable_thinking\":false}'\n"
            "  --date YYYY-MM-DD      the date strftime_now sees (default: today, UTC)\n"
            "  --chat-template FILE   use this template instead of the model's\n"
            "  --template-name NAME   pick a named template (tokenizer_config list / GGUF)\n"
            "  --bos TEXT, --eos TEXT set bos_token / eos_token (default: the model's)\n"
            "  -h, --help             this text\n"
            "\n"
            "Exit status 0 on success, 1 on a template or input error (reason on stderr),\n"
            "2 on a usage error.\n");
}

static json_t *load_json_arg(const char *path, const char *what)
{
    json_error_t je;
    json_t *j = strcmp(path, "-") == 0 ? json_loadf(stdin, 0, &je) : json_load_file(path, 0, &je);
    if (!j)
        fprintf(stderr, "cinfer render: %s %s: line %d: %s\n", what, path, je.line, je.text);
    return j;
}

static int parse_date(const char *s, int64_t *out)
{
    struct tm tmv = {0};
    char tail;
    if (sscanf(s, "%d-%d-%d%c", &tmv.tm_year, &tmv.tm_mon, &tmv.tm_mday, &tail) != 3)
        return -1;
    if (tmv.tm_mon < 1 || tmv.tm_mon > 12 || tmv.tm_mday < 1 || tmv.tm_mday > 31)
        return -1;
    tmv.tm_year -= 1900;
    tmv.tm_mon -= 1;
    *out = (int64_t)timegm(&tmv);
    return 0;
}

struct render_args {
    const char *model, *messages, *tools, *kwargs, *date, *tmpl_file, *name, *bos, *eos;
    int add_gen;
};

static int parse_args(int argc, char **argv, struct render_args *a)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char **slot = NULL;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(s, "--add-generation-prompt")) {
            a->add_gen = 1;
            continue;
        }
        if (!strcmp(s, "--messages"))
            slot = &a->messages;
        else if (!strcmp(s, "--tools"))
            slot = &a->tools;
        else if (!strcmp(s, "--kwargs"))
            slot = &a->kwargs;
        else if (!strcmp(s, "--date"))
            slot = &a->date;
        else if (!strcmp(s, "--chat-template"))
            slot = &a->tmpl_file;
        else if (!strcmp(s, "--template-name"))
            slot = &a->name;
        else if (!strcmp(s, "--bos"))
            slot = &a->bos;
        else if (!strcmp(s, "--eos"))
            slot = &a->eos;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "cinfer render: %s needs a value\n", s);
                return 2;
            }
            *slot = argv[++i];
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "cinfer render: unknown option '%s'\n", s);
            return 2;
        } else if (!a->model) {
            a->model = s;
        } else {
            fprintf(stderr, "cinfer render: unexpected argument '%s'\n", s);
            return 2;
        }
    }
    if (!a->model && !a->tmpl_file) {
        fprintf(stderr, "cinfer render: no MODEL given (see --help)\n");
        return 2;
    }
    if (!a->messages) {
        fprintf(stderr, "cinfer render: --messages FILE is required (see --help)\n");
        return 2;
    }
    return 0;
}

/* Builds the context object; NULL after printing the reason. */
static json_t *build_ctx(const struct render_args *a, const char *bos, const char *eos)
{
    json_t *msgs = load_json_arg(a->messages, "--messages");
    if (!msgs)
        return NULL;
    json_t *ctx = json_object();
    if (json_is_object(msgs)) {
        json_object_update(ctx, msgs);
    } else if (json_is_array(msgs)) {
        json_object_set(ctx, "messages", msgs);
    } else {
        fprintf(stderr, "cinfer render: --messages must hold a JSON array or object\n");
        json_decref(msgs);
        json_decref(ctx);
        return NULL;
    }
    json_decref(msgs);
    if (a->tools) {
        json_t *t = load_json_arg(a->tools, "--tools");
        if (!t) {
            json_decref(ctx);
            return NULL;
        }
        json_object_set_new(ctx, "tools", t);
    }
    if (!json_object_get(ctx, "tools"))
        json_object_set_new(ctx, "tools", json_null());
    if (!json_object_get(ctx, "documents"))
        json_object_set_new(ctx, "documents", json_null());
    if (a->add_gen || !json_object_get(ctx, "add_generation_prompt"))
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(a->add_gen));
    if (bos && !json_object_get(ctx, "bos_token"))
        json_object_set_new(ctx, "bos_token", json_string(bos));
    if (eos && !json_object_get(ctx, "eos_token"))
        json_object_set_new(ctx, "eos_token", json_string(eos));
    if (a->kwargs) {
        json_error_t je;
        json_t *kw = json_loads(a->kwargs, 0, &je);
        if (!json_is_object(kw)) {
            fprintf(stderr, "cinfer render: --kwargs must be a JSON object: %s\n",
                    kw ? "not an object" : je.text);
            json_decref(kw);
            json_decref(ctx);
            return NULL;
        }
        json_object_update(ctx, kw);
        json_decref(kw);
    }
    if (!json_is_array(json_object_get(ctx, "messages"))) {
        fprintf(stderr, "cinfer render: messages must be a JSON array\n");
        json_decref(ctx);
        return NULL;
    }
    return ctx;
}

int cmd_render(int argc, char **argv)
{
    struct render_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc == 1 ? 0 : rc;
    struct tmpl_opts o = {0};
    if (a.date && parse_date(a.date, &o.now_unix) != 0) {
        fprintf(stderr, "cinfer render: --date wants YYYY-MM-DD, got '%s'\n", a.date);
        return 2;
    }
    struct cerr e = {0};
    char *src = NULL, *bos = NULL, *eos = NULL;
    size_t n;
    if (a.tmpl_file)
        rc = fs_read_all(a.tmpl_file, &src, &n, &e);
    else
        rc = tmpl_source_load(a.model, a.name, &src, &e);
    if (!rc && a.model)
        rc = tmpl_special_tokens(a.model, &bos, &eos, &e);
    if (rc) {
        fprintf(stderr, "cinfer render: %s\n", e.msg);
        free(src);
        return 1;
    }
    json_t *ctx = build_ctx(&a, a.bos ? a.bos : bos, a.eos ? a.eos : eos);
    free(bos);
    free(eos);
    if (!ctx) {
        free(src);
        return 1;
    }
    struct tmpl *t = NULL;
    char *out = NULL;
    size_t len = 0;
    rc = tmpl_parse(&t, src, strlen(src), &e);
    if (!rc)
        rc = tmpl_render(t, ctx, &o, &out, &len, &e);
    if (rc)
        fprintf(stderr, "cinfer render: %s\n", e.msg);
    else if (fwrite(out, 1, len, stdout) != len || fflush(stdout) != 0)
        rc = -1;
    free(out);
    tmpl_free(t);
    json_decref(ctx);
    free(src);
    return rc ? 1 : 0;
}
