"""The one wall-clock limit a test may set: a hang guard.

A test waits for the condition it needs (a line on a pipe, a file, a process's exit, a key in
Redis); this limit only turns a hang into a failure instead of a stuck suite. It is far past
anything a run takes, however loaded the machine, so it never decides whether a slow but
correct run passes: a limit a slow run can cross (60 s, say) is a bug in the test.
"""

HANG_GUARD_S = 900.0
