import faulthandler

# A hang fails with every thread's stack instead of hanging CI.
faulthandler.dump_traceback_later(120, exit=True)
