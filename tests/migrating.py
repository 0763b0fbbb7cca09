"""Running an old migration's data function on today's database (tests of what older
versions left behind). Such a function asks the app registry for models by the names they
had when it was written; some have been renamed since (0022), and their tables with them."""

from __future__ import annotations

from django.apps import apps

# Name then → name now.
RENAMED = {"card": "ProgressCard", "sessionview": "SessionFragments"}


class AsWritten:
    """Today's app registry, answering to the model names an older migration uses."""

    def get_model(self, app_label: str, model_name: str):
        return apps.get_model(app_label, RENAMED.get(model_name.lower(), model_name))


as_written = AsWritten()
