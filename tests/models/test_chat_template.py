"""models/chat_template against Jinja2: every template of
tests/fixtures/chat_templates/templates.json that Trainyard recognizes is
rendered by Jinja2 exactly as transformers' apply_chat_template renders it
(sandboxed environment, trim_blocks, lstrip_blocks, raise_exception,
strftime_now) and by the C renderer (through chat_template_tool), for
conversations with and without a system message, several turns, odd
whitespace and non-ASCII text; the texts must be equal, and a conversation
the template rejects must be rejected by Trainyard too. The other templates
must be refused at load with a reason. Exit 77 (skipped) without jinja2."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import unittest

# 0, 1 or 77 (skipped) for ctest (tests/common/unittest_exit.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import unittest_exit  # noqa: E402

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:  # pragma: no cover
    jinja2 = None

ARGS = None
FAMILY = {
    "qwen2": "chatml", "chatml": "chatml", "qwen2.5": "chatml", "llama2": "llama2",
    "llama3": "llama3", "llama3.1": "llama3.1", "mistral": "mistral",
    "mistral-v3": "mistral-v3",
}
REFUSED = {"zephyr": "belongs to no family", "gemma": "belongs to no family",
           "chatml-think": "reasoning model"}
BOS, EOS = {"llama2": ("<s>", "</s>"), "mistral": ("<s>", "</s>"),
            "mistral-v3": ("<s>", "</s>"), "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
            "llama3.1": ("<|begin_of_text|>", "<|eot_id|>")}, None

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "  padded \n"}, {"role": "assistant", "content": " ok\t"},
     {"role": "user", "content": "caf\u00e9 \u65e5\u672c \U0001F980\u3000"}],
    [{"role": "system", "content": "\nRules:\n1. be kind\n"},
     {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": "c"}],
    [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
     {"role": "assistant", "content": "answer"}],
    # Rejected by the templates that demand alternation.
    [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    [{"role": "assistant", "content": "first"}],
]


def jinja_render(template, messages, add_generation_prompt, bos, eos):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template).render(messages=messages,
                                            add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def tool(template, messages, add_generation_prompt, bos, eos):
    request = {"template": template, "messages": messages, "bos": bos, "eos": eos,
               "add_generation_prompt": add_generation_prompt}
    r = subprocess.run([ARGS.tool], input=json.dumps(request), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class ChatTemplateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(ARGS.fixtures, "templates.json"), encoding="utf-8") as f:
            cls.templates = json.load(f)

    def test_recognized_templates_render_like_jinja(self):
        compared = 0
        for name, family in FAMILY.items():
            bos, eos = BOS.get(name, ("<s>", "</s>"))
            for conversation in CONVERSATIONS:
                for gen in (True, False):
                    with self.subTest(template=name, conversation=conversation, gen=gen):
                        try:
                            want = jinja_render(self.templates[name], conversation, gen, bos,
                                                eos)
                        except jinja2.exceptions.TemplateError:
                            want = None
                        got = tool(self.templates[name], conversation, gen, bos, eos)
                        self.assertEqual(got.get("family"), family)
                        if want is None:
                            self.assertIn("error", got, "Jinja refused, Trainyard rendered")
                            continue
                        self.assertNotIn("error", got)
                        self.assertEqual(got["text"], want)
                        compared += 1
        print(f"{compared} renderings equal to Jinja2's", file=sys.stderr)
        self.assertGreater(compared, 60)

    def test_stops(self):
        got = tool(self.templates["qwen2"], CONVERSATIONS[0], True, None, "<|endoftext|>")
        self.assertEqual(got["stops"], ["<|im_end|>", "<|endoftext|>"])
        got = tool(self.templates["llama3.1"], CONVERSATIONS[0], True, "<|begin_of_text|>",
                   "<|eot_id|>")
        self.assertEqual(got["stops"], ["<|eot_id|>"])

    def test_unknown_templates_are_refused(self):
        for name, reason in REFUSED.items():
            with self.subTest(template=name):
                got = tool(self.templates[name], CONVERSATIONS[0], True, "<s>", "</s>")
                self.assertIn("error", got)
                self.assertIn(reason, got["error"])
                self.assertIn("--chat-template FILE", got["error"])
        # A known family's markers with another layout.
        odd = self.templates["chatml"].replace("'\\n' + message['content']",
                                               "': ' + message['content']")
        got = tool(odd, CONVERSATIONS[0], True, None, None)
        self.assertIn("not ChatML's message layout", got["error"])

    def test_json_form(self):
        form = json.dumps({"prefix": "<s>", "system": "<|system|>\n{content}</s>\n",
                           "user": "<|user|>\n{content}</s>\n",
                           "assistant": "<|assistant|>\n{content}</s>\n",
                           "generation_prompt": "<|assistant|>\n", "stop": ["</s>"]})
        got = tool(form, CONVERSATIONS[1], True, None, None)
        self.assertEqual(got["family"], "custom")
        self.assertEqual(got["text"], "<s><|system|>\nYou are terse.</s>\n<|user|>\nHi</s>\n"
                                      "<|assistant|>\n")
        self.assertEqual(got["stops"], ["</s>"])
        bad = [({"user": "{content}"}, '"user" and "assistant" are required'),
               ({"user": "x", "assistant": "{content}"}, "must contain {content}"),
               ({"user": "{content}", "assistant": "{content}", "colour": 1}, 'unknown key'),
               ({"user": "{content}", "assistant": "{content}", "stop": ["a", ""]},
                '"stop" entry 1')]
        for form, reason in bad:
            got = tool(json.dumps(form), CONVERSATIONS[0], True, None, None)
            self.assertIn(reason, got.get("error", ""))
        no_system = json.dumps({"user": "U:{content}\n", "assistant": "A:{content}\n"})
        got = tool(no_system, CONVERSATIONS[1], True, None, None)
        self.assertIn("no \"system\" part", got["error"])

    def test_roles(self):
        got = tool(self.templates["chatml"], [{"role": "tool", "content": "x"}], True, None, None)
        self.assertIn("messages[0]: role 'tool'", got["error"])


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    parser.add_argument("--fixtures", required=True)
    ARGS, rest = parser.parse_known_args()
    if jinja2 is None:
        print("SKIP: the jinja2 package is missing (scripts/install-deps.sh installs it)")
        return 77
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2).result
    return unittest_exit.exit_code(result)


if __name__ == "__main__":
    sys.exit(main())
