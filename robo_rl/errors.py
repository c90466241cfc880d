"""`UserError`: the base of every error a user can fix (a bad setting, a missing file, a device that is not there).

`robo-rl` prints these as one line and exits 2, instead of a traceback. The module imports nothing, so raising
one costs no start-up time and any room (hardware drivers, launchers, the core) can subclass it.
"""


class UserError(Exception):
    """An error the user can fix; the message names the problem and, where there is one, the fix."""
