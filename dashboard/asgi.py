"""ASGI entry point: pushes answered by `PushReceiver`, everything else through Django.
WebSocket routing joins here when live views arrive."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402 - needs Django set up first

from tasks.webhooks import PushReceiver  # noqa: E402

application = ProtocolTypeRouter({"http": PushReceiver(django_application)})
