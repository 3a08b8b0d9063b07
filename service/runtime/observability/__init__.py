"""What the runtime tells about itself: status snapshots, Prometheus metrics, and a
short history of both for the console's charts.

Why apart from the work it describes: reporting must never cost the hot path, so the
work counts into plain integers where it happens and a session's reporter moves them
into these metrics per batch or per interval; the API reads only these plain, frozen
values and the one registry, never the sessions themselves.
"""
