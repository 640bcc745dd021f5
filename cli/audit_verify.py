#!/usr/bin/env python3
"""Check an Autarch audit bundle offline: ``python3 audit_verify.py bundle.json``.

Standalone on purpose: it imports nothing but Python's standard library, so whoever receives a bundle
(``autarch audit export ID``) can check it without Autarch installed; copy this one file. It checks that

- every aggregate's events are versions 1..n, and each event's bytes give its recorded link of the hash chain
  (SHA-256 over the previous link and the event's aggregate id, version, topic and state);
- every checkpoint holds its own digest and names, for the bundle's aggregates, links the bundle has;
- every commit's id is the hash of its raw object, its tree and parents are the ones the object names, and the
  commits form the branch from its base to its head.

It prints each aggregate's head (last version and link): the same line ``autarch audit verify ID`` prints on the
system the bundle came from. Exit status: 0 all holds, 1 something does not (each finding printed), 2 not a
bundle. Events recorded before chaining existed are reported as unchained, not as tampered.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from typing import Any

FORMAT = "autarch-audit-bundle/1"
GENESIS = bytes(32)
EVENT_DOMAIN = b"autarch-chain/1\n"
CHECKPOINT_DOMAIN = b"autarch-checkpoint/1\n"


def link(prev: bytes, originator_id: str, version: int, topic: str, state: bytes) -> bytes:
    """One event's link: the same computation as the recorder's (runtime/chain.py), kept equal by a test."""
    h = hashlib.sha256(EVENT_DOMAIN)
    h.update(prev)
    for part in (originator_id.encode(), str(version).encode(), topic.encode(), state):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def check_aggregate(aggregate: dict[str, Any], problems: list[str], notes: list[str]) -> tuple[int, str] | None:
    """Check one aggregate's chain; returns its head (version, hex link), None when nothing is chained."""
    ident = aggregate["id"]
    events = sorted(aggregate["events"], key=lambda e: e["version"])
    versions = [e["version"] for e in events]
    if versions != list(range(1, len(events) + 1)):
        missing = sorted(set(range(1, (max(versions) if versions else 0) + 1)) - set(versions))
        for version in missing:
            problems.append(f"removed: aggregate {ident} version {version}: the event is not in the bundle")
        duplicated = sorted({v for v in versions if versions.count(v) > 1})
        for version in duplicated:
            problems.append(f"inserted: aggregate {ident} version {version}: more than one event")
    chain = {e["version"]: bytes.fromhex(e["digest"]) for e in events if e.get("digest")}
    head = None
    unchained = 0
    chained_seen = False
    for event in events:
        version, digest = event["version"], chain.get(event["version"])
        if digest is None:
            if chained_seen:
                problems.append(f"inserted: aggregate {ident} version {version}: no link after chained events")
            else:
                unchained += 1
            continue
        chained_seen = True
        prev = chain.get(version - 1, GENESIS) if version > 1 else GENESIS
        state = base64.b64decode(event["state"])
        if link(prev, ident, version, event["topic"], state) != digest:
            problems.append(f"edited: aggregate {ident} version {version}: its bytes do not give its link")
        head = (version, digest.hex())
    if unchained:
        notes.append(f"unchained: aggregate {ident}: {unchained} event(s) recorded before the chain existed")
    return head


def check_checkpoints(bundle: dict[str, Any], problems: list[str]) -> None:
    links = {(a["id"], e["version"]): e.get("digest") for a in bundle["aggregates"] for e in a["events"]}
    ours = {a["id"] for a in bundle["aggregates"]}
    for checkpoint in bundle.get("checkpoints", []):
        payload = checkpoint["payload"].encode()
        prev, digest = bytes.fromhex(checkpoint["prev"]), bytes.fromhex(checkpoint["digest"])
        seq = checkpoint["seq"]
        if hashlib.sha256(CHECKPOINT_DOMAIN + prev + payload).digest() != digest:
            problems.append(f"checkpoint: checkpoint {seq} does not hold its digest")
            continue
        body = json.loads(payload)
        if body.get("seq") != seq:
            problems.append(f"checkpoint: checkpoint {seq} is numbered {body.get('seq')} inside")
        for ident, (version, head) in body["heads"].items():
            if ident not in ours:
                continue
            if (ident, version) not in links:
                problems.append(f"removed: aggregate {ident} version {version}: checkpoint {seq} recorded it, "
                                "the bundle does not hold it")
            elif links[(ident, version)] != head:
                problems.append(f"rewritten: aggregate {ident} version {version}: its link differs from "
                                f"checkpoint {seq}'s")


def check_git(git: dict[str, Any], problems: list[str], notes: list[str]) -> int:
    if "error" in git:
        # Not a finding about the log: the repository was not readable where the bundle was made.
        notes.append(f"git: the branch's commits were not exported: {git['error']}")
        return 0
    known = {git["base"]} if git.get("base") else set()
    last = None
    for commit in git["commits"]:
        raw = base64.b64decode(commit["raw"])
        ident = hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest()  # git's object id (not for secrecy)
        if ident != commit["id"]:
            problems.append(f"git: commit {commit['id']}: its object hashes to {ident}")
            continue
        header = raw.split(b"\n\n", 1)[0].decode(errors="replace").splitlines()
        tree = header[0].split()[1] if header and header[0].startswith("tree ") else None
        parents = [line.split()[1] for line in header if line.startswith("parent ")]
        if tree != commit["tree"] or parents != commit["parents"]:
            problems.append(f"git: commit {ident}: its tree or parents are not the ones its object names")
        if known and not set(parents) & known:
            problems.append(f"git: commit {ident}: none of its parents is the base or an earlier commit")
        known.add(ident)
        last = ident
    if git["commits"] and last != git.get("head"):
        problems.append(f"git: the last commit {last} is not the branch head {git.get('head')}")
    return len(git["commits"])


def verify(bundle: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, notes) of a bundle; no problem means everything in it holds."""
    problems: list[str] = []
    notes: list[str] = []
    for aggregate in bundle["aggregates"]:
        head = check_aggregate(aggregate, problems, notes)
        if head is not None:
            notes.append(f"head: aggregate {aggregate['id']} version {head[0]} link {head[1]}")
    check_checkpoints(bundle, problems)
    if bundle.get("git") is not None:
        count = check_git(bundle["git"], problems, notes)
        if "error" not in bundle["git"]:
            notes.append(f"git: {count} commit(s) of branch {bundle['git']['branch']} up to {bundle['git']['head']}")
    return problems, notes


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: audit_verify.py BUNDLE.json", file=sys.stderr)
        return 2
    try:
        with open(argv[0], "rb") as f:
            bundle = json.load(f)
        if bundle.get("format") != FORMAT:
            raise ValueError(f"format {bundle.get('format')!r}, expected {FORMAT!r}")
        problems, notes = verify(bundle)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        print(f"audit_verify: not a readable bundle: {exc!r}", file=sys.stderr)
        return 2
    for line in notes + problems:
        print(line)
    events = sum(len(a["events"]) for a in bundle["aggregates"])
    verdict = "FAILED" if problems else "OK"
    print(f"{verdict}: {len(bundle['aggregates'])} aggregate(s), {events} event(s), "
          f"{len(bundle.get('checkpoints', []))} checkpoint(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
