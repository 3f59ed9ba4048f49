"""SCRAM-SHA-256/512 (RFC 5802, RFC 7677): stored credentials and the server side of the exchange.

The broker never keeps a password: a credential is the salt, the iteration count and two keys
derived from the salted password (StoredKey, ServerKey), exactly what Kafka stores, so a
stolen credentials file does not let anyone log in. Kafka's admin tools compute the salted
password on the client and send it in AlterUserScramCredentials; `credential_from_password`
does the same for `kgroups users`. A single node keeps them in a file replaced atomically
(write, fsync, rename) so a crash leaves either the old or the new set of users, never a torn
one; a cluster in its store (cluster/catalog_books.StoreCredentials), which every broker reads
again (`reload`) when the store's catalog version moves.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kgroups.broker.config import ConfigError
from kgroups.broker.security.durable_file import replace_durably

# Kafka's ScramMechanism: type ids on the wire and the iteration bounds it accepts.
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {number: name for name, number in MECHANISM_IDS.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramFailure(Exception):
    """The client's message is malformed or its proof is wrong; the text is for the log only."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, _HASHES[mechanism]).digest()


def credential_from_salted(mechanism: str, salt: bytes, salted_password: bytes,
                           iterations: int) -> ScramCredential:
    """RFC 5802 section 3: StoredKey = H(HMAC(SaltedPassword, "Client Key")),
    ServerKey = HMAC(SaltedPassword, "Server Key")."""
    client_key = _hmac(mechanism, salted_password, b"Client Key")
    stored_key = hashlib.new(_HASHES[mechanism], client_key).digest()
    server_key = _hmac(mechanism, salted_password, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi() of RFC 5802, which is PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_password(mechanism: str, password: str,
                             iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    salt = secrets.token_bytes(32)
    return credential_from_salted(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


Users = dict[str, dict[str, ScramCredential]]  # user -> mechanism -> credential


class CredentialBook(Protocol):
    """Where the credentials are kept: read whole, changed by AlterUserScramCredentials'
    upserts and deletions."""

    def load(self) -> Users: ...

    def apply(self, upserts: list[tuple[str, str, ScramCredential]],
              deletions: list[tuple[str, str]], users: Users) -> None:
        """Keep the changes durably (`users`: every credential after them)."""


class CredentialFile:
    """A single node's credentials: one JSON file, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def load(self) -> Users:
        if not self._path.exists():
            return {}
        try:
            raw = json.loads(self._path.read_text(encoding="utf-8"))
            return {user: {
                mechanism: ScramCredential(
                    base64.b64decode(entry["salt"]), base64.b64decode(entry["stored_key"]),
                    base64.b64decode(entry["server_key"]), int(entry["iterations"]))
                for mechanism, entry in mechanisms.items()} for user, mechanisms in raw.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"cannot read the SCRAM credentials in {self._path}: {exc}") from None

    def apply(self, upserts: list[tuple[str, str, ScramCredential]],
              deletions: list[tuple[str, str]], users: Users) -> None:
        data = {user: {mechanism: {
            "salt": base64.b64encode(c.salt).decode(),
            "stored_key": base64.b64encode(c.stored_key).decode(),
            "server_key": base64.b64encode(c.server_key).decode(),
            "iterations": c.iterations} for mechanism, c in mechanisms.items()}
            for user, mechanisms in users.items()}
        replace_durably(self._path, json.dumps(data, indent=1, sort_keys=True))


class CredentialStore:
    """Users' SCRAM credentials (user -> mechanism -> credential), in memory over a book."""

    def __init__(self, book: CredentialBook | Path) -> None:
        """`book` a Path: a single node's credentials file."""
        self._book = CredentialFile(book) if isinstance(book, Path) else book
        self._lock = threading.Lock()
        self._users = self._book.load()

    def reload(self) -> None:
        """Read the credentials again (another broker of the cluster changed them)."""
        with self._lock:
            self._users = self._book.load()

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> Users:
        return {user: dict(mechanisms) for user, mechanisms in self._users.items()}

    def apply(self, upserts: list[tuple[str, str, ScramCredential]],
              deletions: list[tuple[str, str]]) -> None:
        """Make every change, keep them durably at once, then use them."""
        with self._lock:
            users = self.users()
            for user, mechanism in deletions:
                mechanisms = users.get(user, {})
                mechanisms.pop(mechanism, None)
                if not mechanisms:
                    users.pop(user, None)
            for user, mechanism, credential in upserts:
                users.setdefault(user, {})[mechanism] = credential
            self._book.apply(upserts, deletions, users)
            self._users = users


def _attributes(message: str) -> dict[str, str]:
    attributes: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ScramFailure(f"malformed attribute {part[:40]!r}")
        attributes.setdefault(key, value)
    return attributes


def _saslname(text: str) -> str:
    """RFC 5802 escapes ',' as =2C and '=' as =3D in user names; any other '=' is an error."""
    out = text.replace("=2C", ",").replace("=3D", "\x00")
    if "=" in out:
        raise ScramFailure("invalid escape in user name")
    return out.replace("\x00", "=")


class ScramExchange:
    """One server-side SCRAM conversation: client-first -> server-first, client-final ->
    server-final. Any deviation raises ScramFailure; the caller answers
    SASL_AUTHENTICATION_FAILED and closes the connection."""

    def __init__(self, mechanism: str, store: CredentialStore) -> None:
        self.mechanism = mechanism
        self._store = store
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self.complete = False

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramFailure("token is not UTF-8") from None
        if self._credential is None:
            return self._first(text)
        if not self.complete:
            return self._final(text)
        raise ScramFailure("exchange already complete")

    def _first(self, text: str) -> bytes:
        # gs2-header: "n," or "y," (no channel binding), optional "a=authzid", then ","
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag not in ("n", "y"):
            raise ScramFailure("bad gs2 header")
        self._gs2_header = f"{flag},{authzid},"
        attributes = _attributes(bare)
        if "m" in attributes:
            raise ScramFailure("mandatory extension not supported")
        user = _saslname(attributes.get("n", ""))
        client_nonce = attributes.get("r", "")
        if not user or not client_nonce:
            raise ScramFailure("user name or nonce missing")
        if authzid and _saslname(authzid.removeprefix("a=")) != user:
            raise ScramFailure("authorization id differs from the user")
        self.user = user
        credential = self._store.get(user, self.mechanism)
        if credential is None:
            raise ScramFailure("unknown user")
        self._credential = credential
        self._client_first_bare = bare
        self._nonce = client_nonce + base64.b64encode(secrets.token_bytes(18)).decode()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        credential = self._credential
        assert credential is not None
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise ScramFailure("proof missing")
        attributes = _attributes(without_proof)
        expected_binding = base64.b64encode(self._gs2_header.encode()).decode()
        if attributes.get("c") != expected_binding:
            raise ScramFailure("channel binding mismatch")
        # Kafka accepts a nonce that ends with ours (older librdkafka repeats its own part in
        # front); ours, fresh and random, is what makes a replayed proof fail.
        if not attributes.get("r", "").endswith(self._nonce):
            raise ScramFailure("nonce mismatch")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise ScramFailure("proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = _hmac(self.mechanism, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramFailure("proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        digest = hashlib.new(_HASHES[self.mechanism], client_key).digest()
        if not hmac.compare_digest(digest, credential.stored_key):
            raise ScramFailure("invalid credentials")
        self.complete = True
        server_signature = _hmac(self.mechanism, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
