"""The ``email`` notifier: one email per message through the standard library's smtplib.

``[notifiers.email]``: ``smtp_host``, ``smtp_port`` (25), ``security`` (``none``, ``starttls`` or
``ssl``), ``ca_file`` (a CA bundle to trust, e.g. a private CA's; otherwise the system's),
``username`` / ``password`` (optional login), ``sender``, ``recipients`` (always addressed, besides
the tasks' ``owner_email``), ``allow_owner_only`` (with no ``recipients``, rely on the tasks'
``owner_email`` alone; without it an empty ``recipients`` is refused at start-up), ``timeout`` and
``max_retries`` (used by the dispatcher; the timeout also bounds every socket operation here).
"""

from __future__ import annotations

import smtplib
import socket
import ssl
from collections.abc import Mapping
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, ClassVar

import structlog

from ..errors import ConfigError, ConveyorError
from ..settings import Field
from . import Message

__all__ = ["EmailNotifier", "NotifierError"]

log = structlog.get_logger("conveyor.notifiers")


class NotifierError(ConveyorError):
    """A notification could not be delivered (the dispatcher retries, then logs it)."""


def _address(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    return value == "" or ("@" in value and not any(c in value for c in "\r\n"))


def _addresses(value: Any) -> bool:
    return all(_address(item) and item for item in value)


class EmailNotifier:
    """Sends each message as a plain-text email to the configured and the owners' addresses."""

    name: ClassVar[str] = "email"
    settings_schema: ClassVar[Mapping[str, Field]] = {
        "smtp_host": Field("str", "localhost", doc="SMTP server"),
        "smtp_port": Field("int", 25, ge=1, le=65535),
        "security": Field("str", "none", choices=("none", "starttls", "ssl")),
        "ca_file": Field("str", "", doc="CA bundle to trust (PEM)"),
        "username": Field("str", ""),
        "password": Field("str", ""),
        "sender": Field("str", "", check=_address, expect="an email address"),
        "recipients": Field("str_list", (), check=_addresses, expect="a list of email addresses"),
        "allow_owner_only": Field(
            "bool", False, doc="with no recipients, send to the tasks' owner_email alone"
        ),
        "timeout": Field("seconds", 10.0, gt=0),
        "max_retries": Field("int", 3, ge=0),
    }

    def __init__(self, settings: Mapping[str, Any]) -> None:
        """Keep the validated ``[notifiers.email]`` table; the CA file is read now."""
        self.host: str = settings["smtp_host"]
        self.port: int = settings["smtp_port"]
        self.security: str = settings["security"]
        self.username: str = settings["username"]
        self._password: str = settings["password"]
        self.sender: str = settings["sender"] or f"conveyor@{socket.gethostname()}"
        self.recipients: tuple[str, ...] = tuple(settings["recipients"])
        self.owner_only: bool = settings.get("allow_owner_only", False)
        self.timeout: float = settings["timeout"]
        self._context: ssl.SSLContext | None = None
        self.check_settings(settings)
        if self.security != "none":
            try:
                self._context = ssl.create_default_context(cafile=settings["ca_file"] or None)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"notifiers.email.ca_file: cannot load {settings['ca_file']!r}: {exc}",
                    key="notifiers.email.ca_file",
                ) from None

    @staticmethod
    def check_settings(settings: Mapping[str, Any]) -> None:
        """ConfigError for keys that are valid one by one but cannot work together: a login
        over a plain connection, or no ``recipients`` without ``allow_owner_only``."""
        if settings.get("username") and settings.get("security") == "none":
            raise ConfigError(
                'notifiers.email.security = "none" with a username: the password would cross '
                'the network in clear text; expected security = "starttls" or "ssl"',
                key="notifiers.email.security",
            )
        if not settings.get("recipients") and not settings.get("allow_owner_only"):
            raise ConfigError(
                "notifiers.email.recipients = [] while the email notifier is enabled: only a "
                "task's owner_email could receive its messages, and one without it (a task "
                "without owner_email, a run_finished summary) would reach nobody; expected at "
                "least one address in [notifiers.email] recipients, or allow_owner_only = true "
                "in [notifiers.email] to rely on owner_email alone",
                key="notifiers.email.recipients",
            )

    def __repr__(self) -> str:
        """Where it sends (never the password)."""
        return f"EmailNotifier({self.host}:{self.port}, security={self.security})"

    def send(self, message: Message) -> None:
        """Deliver ``message`` as one email; NotifierError (or an OSError) if it was not."""
        owners = [a for a in message.recipients if _address(a) and a]
        if len(owners) < len(message.recipients):  # one bad owner_email loses nobody else
            bad = [a for a in message.recipients if a not in owners]
            log.warning("owner_email addresses skipped", addresses=[repr(a)[:80] for a in bad])
        to = list(dict.fromkeys((*self.recipients, *owners)))
        if not to and self.owner_only:  # as configured: nobody to tell, nothing to retry
            log.info("email not sent: no owner_email to send it to", kind=message.kind)
            return
        if not to:
            raise NotifierError(
                "no recipients: set [notifiers.email] recipients or the tasks' owner_email"
            )
        try:
            mail = EmailMessage()
            mail["Subject"] = message.subject
            mail["From"] = self.sender
            mail["To"] = ", ".join(to)
            mail["Date"] = formatdate(localtime=True)
            mail["Message-ID"] = make_msgid(domain=message.host or None)
            mail["X-Conveyor-Kind"] = message.kind
            mail.set_content(message.text)
        except ValueError as exc:  # an owner_email with a line break, say
            raise NotifierError(f"cannot build the email: {exc}") from None
        try:
            with self._connect() as smtp:
                if self.security == "starttls":
                    smtp.starttls(context=self._context)
                if self.username:
                    smtp.login(self.username, self._password)
                # a partial refusal is not retried (the others have it); a total one raises
                smtp.send_message(mail, from_addr=self.sender, to_addrs=to)
        except smtplib.SMTPException as exc:
            raise NotifierError(f"SMTP server {self.host}:{self.port}: {exc}") from None
        except ssl.SSLError as exc:
            raise NotifierError(f"TLS with {self.host}:{self.port} failed: {exc}") from None
        except OSError as exc:  # refused, unreachable, timed out
            raise NotifierError(f"cannot reach {self.host}:{self.port}: {exc}") from None

    def _connect(self) -> smtplib.SMTP:
        if self.security == "ssl":
            return smtplib.SMTP_SSL(
                self.host, self.port, timeout=self.timeout, context=self._context
            )
        return smtplib.SMTP(self.host, self.port, timeout=self.timeout)
