import faulthandler

import pytest


# A hang fails with every thread's stack instead of hanging CI: each test gets 120 s.
@pytest.fixture(autouse=True)
def hang_timeout():
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()
