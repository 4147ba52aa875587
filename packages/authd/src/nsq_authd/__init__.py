"""nsq_auth: a reference NSQ auth server (nsqd's ``--auth-http-address``) serving a static
file of secrets."""

from .app import build_app
from .options import Options
from .secrets_file import Authorization, Entry, Secrets, SecretsError, SecretStore
from .server import serve

__all__ = ["Authorization", "Entry", "Options", "SecretStore", "Secrets", "SecretsError",
           "build_app", "serve"]
