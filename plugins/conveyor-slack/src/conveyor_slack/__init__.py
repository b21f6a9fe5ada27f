"""Slack notifications for conveyor: the ``slack`` backend of ``conveyor.notifiers``.

Enable it in ``worker.toml``::

    [notifiers]
    enabled = ["slack"]

    [notifiers.slack]
    webhook_url = "https://hooks.slack.com/services/..."   # a secret: never shown

Each notification becomes one Block Kit message (:mod:`conveyor_slack.blocks`) posted by
:class:`SlackNotifier` (:mod:`conveyor_slack.notifier`).
"""

from __future__ import annotations

from .blocks import build_payload
from .notifier import SlackNotifier, SlackWebhookError

__all__ = ["SlackNotifier", "SlackWebhookError", "build_payload"]
__version__ = "0.1.0"
