"""Text helpers for messages shared by the CLIs, the agent, the trainer and the benches."""

__all__ = ["one_line"]


def one_line(text) -> str:
    """``str(text)`` on one line: an exception's text may hold newlines (pyarrow's two-line
    errors, an answer's CR LF), and a message made of it is one log or error line."""
    return " ".join(str(text).split())
