"""Starting, stopping, pausing and restarting pipelines: the runtime as the API sees it.

Why a layer of its own: a pipeline outlives every consumer-group membership it runs as
(an error, a lost broker or a replacement ends one and a new one starts), so what the
API controls and asks about lives here, above the sessions, and survives them.
"""
