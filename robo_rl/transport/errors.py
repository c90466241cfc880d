"""The transport's two errors, below every transport module so that each can raise them without importing another.

`TransportError`: a setup problem a user can fix (a refused bind, a port in use); `MessageError`: bytes from a
peer that cannot be accepted (the codec's and the meta checks' refusals, counted as drops).
"""

from robo_rl.errors import UserError


class TransportError(UserError, RuntimeError):
    """A transport problem a user can fix; the text says how."""


class MessageError(ValueError):
    """A message that cannot be accepted; the text names the reason."""
