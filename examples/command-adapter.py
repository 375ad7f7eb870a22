#!/usr/bin/env python3
"""tenantcheck's external-command adapter protocol, spoken for an OpenAI-compatible API.

Reads one JSON request per line on stdin, answers with JSON lines on stdout (see
`tenantcheck schema command`). Replace `call` to reach any other API.
Usage in a profile: adapter = "command", command = ["python3", "examples/command-adapter.py", BASE_URL, MODEL]
"""
import json, sys, threading, urllib.error, urllib.request
from concurrent.futures import ThreadPoolExecutor

BASE, MODEL = sys.argv[1].rstrip("/"), sys.argv[2]
out = threading.Lock()

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):  # a 3xx comes back as it is: the key never leaves BASE
        return None

opener = urllib.request.build_opener(NoRedirect)

def say(line):
    with out:
        print(json.dumps(line), flush=True)

def call(req):
    if req["op"] == "list_models":
        http = urllib.request.Request(f"{BASE}/models")
    else:
        body = {"model": MODEL, "messages": req.get("messages") or [{"role": "user", "content": "Say hello."}],
                "max_tokens": req.get("max_tokens", 16), "temperature": 0}
        kind = req.get("invalid")
        if kind == "unknown-model": body["model"] = MODEL + "-does-not-exist"
        if kind == "bad-parameter": body["max_tokens"] = -5
        if kind == "empty-messages": body["messages"] = []
        if isinstance(kind, dict): body["max_tokens"] = kind["over-limit"]["context"] + 1
        data = b'{"model": "' + MODEL.encode() + b'", "messages": [' if kind == "malformed-json" else json.dumps(body).encode()
        http = urllib.request.Request(f"{BASE}/chat/completions", data=data, headers={"Content-Type": "application/json"})
    http.add_header("Authorization", "Bearer " + req["credential"])
    try:
        with opener.open(http, timeout=300) as r:
            status, raw, headers = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        status, raw, headers = e.code, e.read().decode(), e.headers
    kept = {}  # every header: each is an output the suite scans (a name sent twice, its values a line each)
    for k, v in headers.items():
        kept[k.lower()] = kept[k.lower()] + "\n" + v if k.lower() in kept else v
    v = json.loads(raw) if raw.startswith("{") else {}
    choice = (v.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") or ""
    if req.get("stream") and status == 200:
        for i, word in enumerate(text.split(" ")):
            say({"id": req["id"], "delta": word if i == 0 else " " + word})
    usage = v.get("usage")
    error = v.get("error")
    say({"id": req["id"], "done": {"status": status, "content": text, "finish_reason": choice.get("finish_reason"), "raw": raw,
         "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
                   "cached_tokens": cached(v)} if usage else None,
         "error": {"message": error.get("message", ""), "kind": error.get("type"),
                   "code": None if error.get("code") is None else str(error["code"])} if isinstance(error, dict) else None,
         "headers": kept}})

def cached(v):
    """Prompt tokens the engine reused from its cache, as it reports them (None when it does not)."""
    details = (v.get("usage") or {}).get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        return details["cached_tokens"]
    return (v.get("timings") or {}).get("cache_n")

with ThreadPoolExecutor(max_workers=16) as pool:
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] != "cancel":
            pool.submit(call, req)
