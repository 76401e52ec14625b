"""The requests and answers the engine's two sides exchange: one typed class per action, both directions.

The Python side (:mod:`.engine_procedure`) sends a request object; the JVM side (``EngineProtocol.java``,
its twin) parses it, refuses an action or field it does not define, and answers with a status from
:class:`Status`. Both sides list the same actions, fields, statuses and shared column names, and the JVM
side's ``describe`` answer says which it speaks, so a test holds the two lists equal.

    >>> Commit(token="0b6d").wire()
    {'protocol': 1, 'action': 'commit', 'token': '0b6d'}
    >>> Commit(token="0b6d").answer({"protocol": 1, "status": "committed", "version": 8}).version
    8
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Generic, TypeVar, cast

from pydantic import BaseModel, ConfigDict

#: The request format both sides speak; the JVM side refuses any other.
PROTOCOL = 1

#: The columns both sides name: a row's data file and row index in a table at a version (what a
#: deletion vector addresses), the net change a refresh writes for a key, how many output rows the key
#: must hold before the commit, and the key's two hashes (the proof of the key set).
FILE_COLUMN = "_fkjoin_file"
ROW_COLUMN = "_fkjoin_row"
CHANGE_COLUMN = "_fkjoin_change"
EXPECTED_COLUMN = "_fkjoin_expected"
HASH_COLUMNS = ("_fkjoin_h1", "_fkjoin_h2")
#: A changed key's inserts less deletes in its feed (the join state adds it to the key's held rows).
NET_COLUMN = "_fkjoin_net"


class Status(StrEnum):
    """Every status an answer carries."""

    READY = "ready"
    PREPARED = "prepared"
    COMMITTED = "committed"
    MERGE_REQUIRED = "merge_required"
    ABORTED = "aborted"
    BUILDING = "building"
    REFUSED = "refused"
    HELD = "held"
    ABSENT = "absent"
    DUPLICATES = "duplicates"
    STALE = "stale"
    ADVANCED = "advanced"
    PERSISTED = "persisted"
    DROPPED = "dropped"


class Answer(BaseModel):
    """An answer's status and, for a refusal or a stale state, why. Fields an action adds are typed on
    its own answer class; fields this side does not read are kept (``model_extra``)."""

    model_config = ConfigDict(extra="allow")
    protocol: int
    status: Status
    reason: str | None = None


AnswerT = TypeVar("AnswerT", bound=Answer)


class Request(BaseModel, Generic[AnswerT]):
    """One request: its action (the class's :attr:`action`) and its fields; None fields are left out.
    ``AnswerT`` is the class of its answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    action: ClassVar[str]
    answer_class: ClassVar[type[Answer]] = Answer

    def wire(self) -> dict[str, Any]:
        """The JSON object sent, with the protocol and the action first."""
        return {"protocol": PROTOCOL, "action": self.action, **self.model_dump(exclude_none=True)}

    def answer(self, raw: dict[str, Any]) -> AnswerT:
        """``raw`` (the JVM side's JSON, parsed) as this request's typed answer."""
        return cast(AnswerT, self.answer_class.model_validate(raw))


class DescribeAnswer(Answer):
    #: The actions, comma-separated.
    actions: str
    #: Each action's request fields.
    requests: dict[str, list[str]] = {}
    statuses: list[str] = []
    #: The shared column names (:data:`FILE_COLUMN` ...).
    columns: dict[str, Any] = {}


class Describe(Request[DescribeAnswer]):
    """What the JVM side speaks: the first request a session sends (:func:`.engine_procedure.supports`)."""

    action: ClassVar[str] = "describe"
    answer_class = DescribeAnswer


class PrepareAnswer(Answer):
    token: str | None = None
    version: int | None = None
    #: Each data file of the output: size, physical rows (None: unknown), rows its deletion vector hides.
    files: list[list[int | None]] = []


class Prepare(Request[PrepareAnswer]):
    """Prepare a net-change commit of ``output`` at ``expected_version`` (``NetChangeCommit.java``):
    ``located`` names the view of the affected keys' positions, ``rows`` the new rows' view, ``proof``
    the key set's count and hashes."""

    action: ClassVar[str] = "prepare"
    answer_class = PrepareAnswer
    output: str
    expected_version: int
    app_id: str
    seq: int
    located: str | None = None
    replaced: bool | None = None
    rows: str | None = None
    proof: dict[str, Any] | None = None


class CommitAnswer(Answer):
    version: int
    #: The absolute paths of the data files the commit added.
    added: list[str] = []


class Commit(Request[CommitAnswer]):
    """Commit a prepared transaction."""

    action: ClassVar[str] = "commit"
    answer_class = CommitAnswer
    token: str


class Abort(Request[Answer]):
    """Drop a prepared transaction (its files stay unreferenced until a VACUUM)."""

    action: ClassVar[str] = "abort"
    token: str


class FilesAnswer(Answer):
    files: int
    #: Where the file list came from (a kept list, a snapshot, ...).
    source: str


class Files(Request[FilesAnswer]):
    """A table at a version as a temporary view over the data files the JVM side keeps warm."""

    action: ClassVar[str] = "files"
    answer_class = FilesAnswer
    path: str
    version: int
    view: str
    positions: bool = False


class FeedSizeAnswer(Answer):
    #: One per table asked, -1 where a commit is gone.
    sizes: list[int]


class FeedSize(Request[FeedSizeAnswer]):
    """The bytes each table's change feed reads (``tables``: ``{"path", "after", "to"}`` each), from
    the commits alone."""

    action: ClassVar[str] = "feed_size"
    answer_class = FeedSizeAnswer
    tables: list[dict[str, Any]]


class WarmBuild(Request[Answer]):
    """Build an output's join state from its inputs' rows and its positions (in the background)."""

    action: ClassVar[str] = "warm_build"
    state: str
    left: dict[str, Any]
    right: dict[str, Any]
    output: dict[str, Any]
    memory_bytes: int | None = None
    disk_reserve_bytes: int | None = None


class WarmLookupAnswer(Answer):
    token: str | None = None
    left_rows: int | None = None
    right_rows: int | None = None
    located: int | None = None
    held_rows: int | None = None
    memory_bytes: int | None = None
    budget_bytes: int | None = None
    disk_bytes: int | None = None
    built_ms: int | None = None
    #: The durable copy this JVM loaded for the lookup, the last one written, why the last write failed.
    loaded: dict[str, Any] | None = None
    persisted: dict[str, Any] | None = None
    persist_error: str | None = None
    #: With ``duplicates``: the side whose changes repeat a key, and how many keys.
    side: str | None = None
    repeats: int | None = None


class WarmLookup(Request[WarmLookupAnswer]):
    """The rows and positions a refresh's changes affect, as the views named in ``views``."""

    action: ClassVar[str] = "warm_lookup"
    answer_class = WarmLookupAnswer
    state: str
    left: dict[str, Any]
    right: dict[str, Any]
    output: dict[str, Any]
    views: dict[str, str]


class WarmAdvanceAnswer(Answer):
    output_version: int | None = None


class WarmAdvance(Request[WarmAdvanceAnswer]):
    """Bring the state to a refresh's commit: ``removed`` names the view of keys whose rows went, and
    ``added`` the data files the commit wrote."""

    action: ClassVar[str] = "warm_advance"
    answer_class = WarmAdvanceAnswer
    state: str
    token: str
    output: str
    version: int
    removed: str | None = None
    added: list[str]


class WarmPeekAnswer(Answer):
    #: With ``held``: ``{"id", "version"}`` of the output and of each input.
    output: dict[str, Any] | None = None
    left: dict[str, Any] | None = None
    right: dict[str, Any] | None = None


class WarmPeek(Request[WarmPeekAnswer]):
    """The versions the JVM holds a state for (no Spark job)."""

    action: ClassVar[str] = "warm_peek"
    answer_class = WarmPeekAnswer
    state: str
    output: dict[str, Any]


class WarmSettleAnswer(Answer):
    persisted: dict[str, Any] | None = None


class WarmSettle(Request[WarmSettleAnswer]):
    """Wait for the state's build and its durable copy's upload."""

    action: ClassVar[str] = "warm_settle"
    answer_class = WarmSettleAnswer
    state: str


class WarmDrop(Request[Answer]):
    """Forget an output's state in this JVM."""

    action: ClassVar[str] = "warm_drop"
    state: str


#: Each action's request class.
REQUESTS: dict[str, type[Request[Any]]] = {
    request.action: request
    for request in (
        Describe,
        Prepare,
        Commit,
        Abort,
        Files,
        FeedSize,
        WarmBuild,
        WarmLookup,
        WarmAdvance,
        WarmPeek,
        WarmSettle,
        WarmDrop,
    )
}


def request_fields() -> dict[str, list[str]]:
    """Each action's request fields, sorted: what the JVM side's ``describe`` lists as ``requests``."""
    return {action: sorted(cls.model_fields) for action, cls in REQUESTS.items()}
