#!/usr/bin/env python3
"""The reference vendor's Azure OpenAI front end, spoken to by the openai SDK's own clients.

Usage: azure_client.py TENANTCHECK_BINARY

Starts `tenantcheck sim --api azure` on 127.0.0.1, then, with the `openai` package
(pinned by .ci/run): `AzureOpenAI` (the deployment URL form, the `api-key` header,
retries off) asks for a completion, a stream with usage (whose first chunk is the
prompt's content-filter verdict, with no choices), a prompt past the context (a 400,
BadRequestError) and with a wrong key (a 401, AuthenticationError); `OpenAI` at
`/openai/v1/` (a bearer token) asks for a completion and lists the models. Exits 0
when every answer parses and says what it should.
"""
import os
import subprocess
import sys

import openai

KEY_A, KEY_B = "azure-interop-key-a-5e1c", "azure-interop-key-b-92d0"


def main() -> None:
    env = dict(os.environ, TENANTCHECK_KEY_A=KEY_A, TENANTCHECK_KEY_B=KEY_B)
    sim = subprocess.Popen([sys.argv[1], "sim", "--api", "azure", "--listen", "127.0.0.1:0"],
                           stdout=subprocess.PIPE, env=env, text=True)
    try:
        line = sim.stdout.readline()
        endpoint = next(w for w in line.split() if w.startswith("http://127.0.0.1:"))
        check(endpoint)
    finally:
        sim.terminate()
        sim.wait()


def check(endpoint: str) -> None:
    azure = openai.AzureOpenAI(azure_endpoint=endpoint, api_key=KEY_A, api_version="2024-10-21", max_retries=0)
    plain = azure.chat.completions.create(
        model="sim-1", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert plain.choices[0].message.content, plain
    assert plain.usage.prompt_tokens > 0, plain
    print(f"ok: AzureOpenAI completion: {plain.choices[0].finish_reason}, {plain.usage.prompt_tokens} prompt tokens")

    chunks = list(azure.chat.completions.create(
        model="sim-1", messages=[{"role": "user", "content": "Say hello."}], max_tokens=16,
        stream=True, stream_options={"include_usage": True}))
    first = chunks[0]
    assert first.choices == [] and first.id == "", first
    assert first.model_extra.get("prompt_filter_results"), first
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text, chunks
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0, chunks[-1]
    print(f"ok: AzureOpenAI stream: {len(chunks)} chunks, the first the prompt filter's, usage last")

    try:
        azure.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "word " * 20000}],
                                      max_tokens=16)
        raise AssertionError("a prompt past the context was answered")
    except openai.BadRequestError as e:
        assert e.status_code == 400, e
        print(f"ok: past the context: BadRequestError {e.status_code}")

    wrong = openai.AzureOpenAI(azure_endpoint=endpoint, api_key="not-a-key", api_version="2024-10-21", max_retries=0)
    try:
        wrong.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        raise AssertionError("a wrong key was answered")
    except openai.AuthenticationError as e:
        assert e.status_code == 401, e
        print("ok: a wrong key: AuthenticationError 401")

    v1 = openai.OpenAI(base_url=endpoint + "/openai/v1/", api_key=KEY_B, max_retries=0)
    answer = v1.chat.completions.create(model="sim-1", messages=[{"role": "user", "content": "Say hello."}],
                                        max_tokens=16)
    assert answer.choices[0].message.content, answer
    models = [m.id for m in v1.models.list()]
    assert models == ["sim-1"], models
    print(f"ok: OpenAI client at /openai/v1/: completion and models {models}")


if __name__ == "__main__":
    main()
