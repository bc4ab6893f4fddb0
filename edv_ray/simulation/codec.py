"""Seeded draws and the opaque marks the simulated engine leaves in text.

* :func:`uniform` — every random decision of the engine is a pure function of a key
  (the profile's seed, who, which episode, what is decided), so a resumed run or a
  restarted server answers the same.
* **Item tags** ride in the text of every experience the engine writes (a lesson's rule,
  a ReasoningBank item's content): ``[ref <30 consonants>]`` — the item's planted truth
  (correct or wrong), its source task's planted type and its writer, encrypted and
  authenticated with a key derived from the profile's ``secret`` (HMAC-SHA256). The
  framework never reads them; the engine decodes them when the item is retrieved into
  a prompt. Text that carries no valid tag (the framework's own poison rules, a bank
  written under another secret) is *undecodable*.
* **Run markers** ride in an acting agent's text turns: the episode's planted outcome and
  its agent, so the engine, as distiller, verifier or judge, knows the truth of a run
  whose reward it is not shown.

Tokens are 16 lowercase consonants (a nibble each): fencing leaves them intact, and they
hold no digit or word a benchmark could mistake for information the agent gave (τ²-bench's
communicate check is a substring match).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

_ITEM, _MARKER = 1, 2
_ALPHABET = "bcdfghjklmnpqrst"  # 16 consonants: one per nibble
_TOKEN = re.compile(r"\[ref ([bcdfghjklmnpqrst]{30})\]")


def uniform(*parts: object) -> float:
    """A number in [0, 1) determined by ``parts`` (stable across processes and runs)."""
    key = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2.0 ** 64


def choose(options: list, *parts: object):
    """One element of ``options`` (non-empty), chosen by :func:`uniform`."""
    return options[min(len(options) - 1, int(uniform(*parts) * len(options)))]


@dataclass(frozen=True)
class ItemTruth:
    correct: bool
    type_hash: int  # keyed hash of the source task's "domain/type"
    writer_hash: int  # keyed hash of the writing agent


@dataclass(frozen=True)
class RunMark:
    success: bool
    agent_hash: int


class Codec:
    """Tags and markers under one profile secret."""

    def __init__(self, secret: str) -> None:
        self._key = hashlib.sha256(b"edv-sim\x1f" + secret.encode()).digest()

    def h16(self, text: str) -> int:
        """A keyed 16-bit hash (agent names, task types): opaque to the framework."""
        return int.from_bytes(hmac.new(self._key, b"h" + text.encode(), "sha256").digest()[:2], "big")

    def _seal(self, payload: bytes, nonce_seed: str) -> str:
        nonce = hashlib.blake2b(nonce_seed.encode(), digest_size=4).digest()
        pad = hmac.new(self._key, b"k" + nonce, "sha256").digest()[:len(payload)]
        ct = bytes(a ^ b for a, b in zip(payload, pad))
        mac = hmac.new(self._key, b"m" + nonce + ct, "sha256").digest()[:5]
        token = "".join(_ALPHABET[b >> 4] + _ALPHABET[b & 15] for b in nonce + ct + mac)
        return f"[ref {token}]"

    def _open(self, token: str) -> bytes | None:
        nib = [_ALPHABET.index(c) for c in token]
        raw = bytes(hi << 4 | lo for hi, lo in zip(nib[::2], nib[1::2]))
        nonce, ct, mac = raw[:4], raw[4:10], raw[10:]
        if not hmac.compare_digest(mac, hmac.new(self._key, b"m" + nonce + ct, "sha256").digest()[:5]):
            return None
        pad = hmac.new(self._key, b"k" + nonce, "sha256").digest()[:len(ct)]
        return bytes(a ^ b for a, b in zip(ct, pad))

    # ---- items ------------------------------------------------------------------------
    def item_tag(self, correct: bool, type_key: str, writer: str, nonce_seed: str) -> str:
        payload = bytes([_ITEM, int(correct)]) + self.h16(type_key).to_bytes(2, "big") \
            + self.h16(writer).to_bytes(2, "big")
        return self._seal(payload, nonce_seed)

    def item_truth(self, text: str) -> ItemTruth | None:
        """The truth of the first valid item tag in ``text`` (None: no valid tag)."""
        for token in _TOKEN.findall(text or ""):
            p = self._open(token)
            if p is not None and p[0] == _ITEM:
                return ItemTruth(bool(p[1]), int.from_bytes(p[2:4], "big"),
                                 int.from_bytes(p[4:6], "big"))
        return None

    # ---- run markers ------------------------------------------------------------------
    def marker(self, success: bool, agent: str, nonce_seed: str) -> str:
        payload = bytes([_MARKER, int(success)]) + self.h16(agent).to_bytes(2, "big") + b"\0\0"
        return self._seal(payload, nonce_seed)

    def run_mark(self, text: str) -> RunMark | None:
        """The planted outcome of the run whose transcript is ``text`` (its last marker)."""
        found = None
        for token in _TOKEN.findall(text or ""):
            p = self._open(token)
            if p is not None and p[0] == _MARKER:
                found = RunMark(bool(p[1]), int.from_bytes(p[2:4], "big"))
        return found


def strip_marks(text: str) -> str:
    """``text`` without tags or markers (for text the engine derives from a prompt)."""
    return _TOKEN.sub("", text or "")
