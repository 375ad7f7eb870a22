#!/usr/bin/env python3
"""Verifies a tenantcheck report envelope with a third-party DSSE verifier.

Usage: verify_dsse.py RUN_DIR

Checks, with the `securesystemslib` package (pip install 'securesystemslib[crypto]')
and Python's `cryptography`, that:
- the public key (SPKI PEM) and the private key (PKCS#8 PEM) load;
- the envelope's signature verifies under the key id securesystemslib derives itself;
- the statement's subject is the transcript's SHA-256.
Exits 0 when all hold.
"""
import base64
import hashlib
import json
import pathlib
import sys

from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

run = pathlib.Path(sys.argv[1])
public = load_pem_public_key((run / "signing-key.pub.pem").read_bytes())
private_path = run / "signing-key.pem"
if private_path.exists():
    load_pem_private_key(private_path.read_bytes(), password=None)
raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
keyval = {"keytype": "ed25519", "keyval": {"public": raw}, "scheme": "ed25519"}
keyid = hashlib.sha256(json.dumps(keyval, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
key = SSlibKey(keyid, "ed25519", "ed25519", {"public": raw})

envelope = Envelope.from_dict(json.loads((run / "report.dsse.json").read_text()))
accepted = envelope.verify([key], 1)
assert keyid in accepted, f"securesystemslib did not accept key {keyid}"

statement = json.loads(base64.b64decode(json.loads((run / "report.dsse.json").read_text())["payload"]))
transcript = hashlib.sha256((run / "transcript.jsonl").read_bytes()).hexdigest()
assert statement["_type"] == "https://in-toto.io/Statement/v1"
assert statement["subject"][0]["digest"]["sha256"] == transcript, "subject is not the transcript"
print(f"securesystemslib: envelope verified with key {keyid}; subject is the transcript ({transcript})")
