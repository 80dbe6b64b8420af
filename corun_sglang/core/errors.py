"""The errors of records: one base, so a caller can tell a record that cannot be served (``RecordError``, and the
kinds below it, ``tiers.TiersError`` and ``packing.PackingError``) from anything else that failed."""


class RecordError(ValueError):
    """A record that cannot be read or served; the message names the cause and the fix."""
