"""The exceptions kir raises."""


class KirError(Exception):
    """A binary could not be read: the message says what, where and at which byte offset."""
