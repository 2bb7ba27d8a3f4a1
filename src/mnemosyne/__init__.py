"""Mnemosyne client: a thin Python layer over the SQL API (schema ``mnemo``).

Every method calls one SQL function; all memory logic lives in the database.
"""

from .client import Client, connect, default_dsn
from .errors import MnemoError

__all__ = ["Client", "MnemoError", "connect", "default_dsn"]
