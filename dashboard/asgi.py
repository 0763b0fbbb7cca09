"""ASGI entry point: pushes answered by `PushReceiver` and applied by this process's applier
(tasks/pushes/applier.py: a process beside it by default, or a thread), team notifications sent by
its sender thread (tasks/notify/sender.py), questions past their agent's expiry by its
expirer thread (tasks/answering/expiry.py), push configs of ended tasks deleted by its
config ender (tasks/answering/push_configs.py), static files served by the app itself (one
process to run, nothing to collect), other HTTP through Django, and the live socket at
/ws/live/ behind session authentication and an exact origin check (tasks/live/origins.py)."""

import gc
import os
import resource

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_application = get_asgi_application()

# These need Django set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.urls import path  # noqa: E402

from tasks.answering import expiry, held, push_configs  # noqa: E402
from tasks.live.consumers import LiveConsumer, ServerSend  # noqa: E402
from tasks.live.origins import ExactOriginValidator  # noqa: E402
from tasks.notify import sender  # noqa: E402
from tasks.pushes import applier  # noqa: E402
from tasks.pushes.receive import PushReceiver  # noqa: E402
from tasks.web.unavailable import SocketsWhileDatabaseAway  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": PushReceiver(ASGIStaticFilesHandler(django_application)),
        "websocket": ServerSend(
            ExactOriginValidator(
                SocketsWhileDatabaseAway(
                    AuthMiddlewareStack(URLRouter([path("ws/live/", LiveConsumer.as_asgi())]))
                )
            )
        ),
    }
)

# Every connection (a socket, a slow client, the pool's) costs a descriptor, and a soft limit
# of 1,024 ran out under a flood of slow bodies, taking the Redis layer's connections with it:
# take what the system allows (the hard limit; a proxy in front bounds slow clients anyway).
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != resource.RLIM_INFINITY and _hard != resource.RLIM_INFINITY and _hard > _soft:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))

# This process's applier: pushes it receives are applied by it, at once, in batches under load.
applier.start()
# And its notification sender, which sends team channels what the outbox holds.
sender.start()
# And its expirer: questions open longer than their agent's declared expiry.
expiry.start()
# And its sender of held answers: page answers whose Undo time has passed.
held.start()
# And its config ender: push configs of ended tasks deleted at their agents.
push_configs.start()

# What starting made (Django, the apps, URL patterns) lives as long as the process. Out of the
# collector's sight, a full collection scans only what came since: it stalls the event loop
# (pushes, sockets) for 6-7 ms rather than 35-60 (measured at 50 pushes/s, 100 sockets).
gc.freeze()
