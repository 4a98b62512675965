#!/usr/bin/env python3
"""The official `openai` Python client against a real `qrun serve` on the loopback.

Model: Gemma 3 270M (the fetched real model) with Gemma's chat template from the shared
templates, served with an API key, two sequences at once. Checked: the model list; completions and chat
completions, whole and streamed (the streamed text equals the whole one, and a final chunk
carries usage with stream_options.include_usage); greedy completions equal `qrun run` on the
same prompt; stop strings; a seed repeats a sampled reply; usage counts; and the client's
error classes for a wrong key (401) and a prompt longer than the context (400).

Run by ctest (tests/CMakeLists.txt) with QRUN_BINARY set. Exits 77 (ctest's skip) when the
client or the model is missing, unless QRUN_REQUIRE_OPENAI_CLIENT is set (scripts/test.sh
sets it: there scripts/install-deps.sh --test and scripts/fetch-models.sh provide both).
"""
import json
import os
import pathlib
import re
import subprocess
import sys
import time
import unittest

SKIP = 77
QRUN = os.environ.get("QRUN_BINARY", "")
MODELS = pathlib.Path(os.environ.get("QRUN_MODELS", pathlib.Path.home() / ".cache/qrun/models"))
MODEL = MODELS / "gemma-3-270m-q4_k_m.gguf"
DATA = pathlib.Path(os.environ.get("QRUN_TEST_DATA") or os.environ.get("QRUN_TEST_DATA_DEFAULT")
                    or pathlib.Path(__file__).resolve().parents[2] / "shared")
# The base model's GGUF has no chat template: Gemma's turn format, from the shared templates.
TEMPLATE = DATA / "templates" / "google-gemma-2-2b-it.jinja"
KEY = "sk-qrun-test"
PROMPT = "The capital of France is"


def missing_prerequisite():
    try:
        import openai  # noqa: F401
    except ImportError:
        return "the openai package is not installed (scripts/install-deps.sh --test)"
    if not MODEL.is_file():
        return f"{MODEL} is not fetched (scripts/fetch-models.sh)"
    if not TEMPLATE.is_file():
        return f"{TEMPLATE} is missing (set QRUN_TEST_DATA to the shared folder)"
    if not os.access(QRUN, os.X_OK):
        return f"QRUN_BINARY ({QRUN!r}) is not an executable"
    return None


class OpenAIClient(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import openai

        cls.server = subprocess.Popen(
            [QRUN, "serve", "-m", str(MODEL), "--port", "0", "-np", "2", "-c", "1024", "-t", "2",
             "--chat-template-file", str(TEMPLATE), "--api-key", KEY, "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = cls.server.stderr.readline()  # "qrun: listening on http://127.0.0.1:PORT"
        match = re.search(r"listening on (http://\S+)", line)
        if match is None:
            cls.server.kill()
            raise RuntimeError(f"qrun serve did not start: {line}{cls.server.stderr.read()}")
        cls.base = match.group(1)
        cls.client = openai.OpenAI(base_url=cls.base + "/v1", api_key=KEY, max_retries=0,
                                   timeout=120)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait(timeout=30)

    def complete(self, **kwargs):
        args = {"model": self.model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0}
        args.update(kwargs)
        return self.client.completions.create(**args)

    def chat(self, **kwargs):
        args = {"model": self.model, "max_tokens": 12, "temperature": 0,
                "messages": [{"role": "user", "content": "Name one colour."}]}
        args.update(kwargs)
        return self.client.chat.completions.create(**args)

    def test_models_lists_the_one_model(self):
        models = self.client.models.list().data
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0].id, "gemma-3-270m-q4_k_m.gguf")

    def test_greedy_completion_equals_qrun_run(self):
        r = self.complete()
        self.assertEqual(r.object, "text_completion")
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + 12)
        run = subprocess.run([QRUN, "run", "-m", str(MODEL), "-p", PROMPT, "-n", "12", "--temp",
                              "0", "-t", "2", "-q", "--no-stdin"],
                             capture_output=True, text=True, timeout=300, check=True)
        self.assertEqual(r.choices[0].text, run.stdout)
        # The prompt's tokens as qrun run counts them: BOS and the words.
        self.assertGreater(r.usage.prompt_tokens, 1)

    def test_streamed_completion_equals_the_whole_one(self):
        whole = self.complete().choices[0].text
        chunks = list(self.complete(stream=True, stream_options={"include_usage": True}))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        self.assertEqual(text, whole)
        self.assertIsNotNone(chunks[-1].usage)
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)
        self.assertTrue(all(c.usage is None for c in chunks[:-1]))

    def test_chat_whole_and_streamed(self):
        r = self.chat()
        message = r.choices[0].message
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(message.role, "assistant")
        self.assertTrue(message.content)
        self.assertEqual(r.usage.total_tokens,
                         r.usage.prompt_tokens + r.usage.completion_tokens)
        chunks = list(self.chat(stream=True, stream_options={"include_usage": True}))
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(streamed, message.content)
        self.assertEqual(chunks[-1].usage.completion_tokens, r.usage.completion_tokens)

    def test_stop_string_ends_the_reply_before_it(self):
        whole = self.complete(max_tokens=24).choices[0].text
        words = whole.split()
        self.assertGreaterEqual(len(words), 3, whole)
        stop = " " + words[2]  # the third word, with the space before it
        r = self.complete(max_tokens=24, stop=[stop])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, whole[:whole.index(stop)])

    def test_a_seed_repeats_a_sampled_reply(self):
        first = self.complete(temperature=1.0, seed=1234, max_tokens=16).choices[0].text
        again = self.complete(temperature=1.0, seed=1234, max_tokens=16).choices[0].text
        self.assertEqual(first, again)

    def test_tool_call_reaches_the_client_and_the_follow_up_renders(self):
        # Gemma's template knows no tools: the generic format, held to a call by "required".
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]
        question = {"role": "user", "content": "What is the weather in Paris right now?"}
        r = self.chat(messages=[question], tools=tools, tool_choice="required", max_tokens=64)
        self.assertEqual(r.choices[0].finish_reason, "tool_calls")
        calls = r.choices[0].message.tool_calls
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0].function.name, "get_weather")
        self.assertIsInstance(json.loads(calls[0].function.arguments)["city"], str)
        streamed = list(self.chat(messages=[question], tools=tools, tool_choice="required",
                                  max_tokens=64, stream=True))
        deltas = [d for c in streamed if c.choices for d in (c.choices[0].delta.tool_calls or [])]
        self.assertEqual([(d.index, d.function.name, d.function.arguments) for d in deltas],
                         [(0, "get_weather", calls[0].function.arguments)])
        self.assertEqual(streamed[-1].choices[0].finish_reason, "tool_calls")
        # The call and its result go back as the client library writes them.
        follow = self.chat(messages=[question, r.choices[0].message.model_dump(exclude_none=True),
                                     {"role": "tool", "tool_call_id": calls[0].id,
                                      "content": "18 C and clear"}],
                           tools=tools, max_tokens=16)
        self.assertGreater(follow.usage.prompt_tokens, r.usage.prompt_tokens)

    def test_errors_are_the_clients_error_classes(self):
        import openai

        wrong = openai.OpenAI(base_url=self.base + "/v1", api_key="sk-wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            wrong.models.list()
        with self.assertRaises(openai.BadRequestError) as caught:
            self.complete(prompt="word " * 2000)
        self.assertEqual(caught.exception.status_code, 400)
        self.assertIn("context", str(caught.exception))


if __name__ == "__main__":
    problem = missing_prerequisite()
    if problem is not None:
        required = os.environ.get("QRUN_REQUIRE_OPENAI_CLIENT", "") not in ("", "0")
        print(f"openai_client_test: {problem}", file=sys.stderr)
        sys.exit(1 if required else SKIP)
    start = time.time()
    result = unittest.main(exit=False, verbosity=2).result
    print(f"openai_client_test: {time.time() - start:.1f} s", file=sys.stderr)
    sys.exit(0 if result.wasSuccessful() else 1)
