"""Sends one mail with an attachment through Python's smtplib.

Usage: send.py HOST PORT FROM TO. The email channel's tests run it against
the channel's listener on loopback, so a second, independent SMTP and MIME
implementation talks to it.
"""
import smtplib
import sys
from email.message import EmailMessage

host, port, sender, rcpt = sys.argv[1:5]
msg = EmailMessage()
msg["From"] = sender
msg["To"] = rcpt
msg["Subject"] = "from python"
msg["Message-ID"] = "<py1@example.org>"
msg.set_content("Sent by smtplib.\n")
msg.add_attachment(b"line one\nline two\n", maintype="text", subtype="plain", filename="notes.txt")
with smtplib.SMTP(host, int(port), timeout=30) as s:
    s.ehlo("python.test")
    refused = s.send_message(msg)
    if refused:
        sys.exit("refused: %r" % (refused,))
