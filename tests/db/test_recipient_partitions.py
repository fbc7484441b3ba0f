"""Recipients partitioned by batch (scheduler_app.recipient_partitions): the recipient table
converted while it holds rows, each batch's recipients in the partition of its id's range,
read by the ORM like any recipient, a lane's statements reading that partition alone, and
retention dropping a partition whole once its batches have finished."""

from __future__ import annotations

import datetime as dt
import re

import psycopg
import pytest
from django.core.management import call_command
from django.db import IntegrityError, ProgrammingError, connection, transaction

from scheduler_app import clock, recipient_partitions
from scheduler_app.db.postgresql import partitioning
from scheduler_app.db.postgresql import recipients as statements
from scheduler_app.db.postgresql.partitioning import id_sequence
from scheduler_app.models import FeedbackEvent, PruneRun, Recipient, SendBatch
from scheduler_app.retention import PARTITIONED_RECIPIENTS, finished_batches, prune
from tests.helpers import migrate_database, scratch_database

pytestmark = pytest.mark.postgres_only

Status = SendBatch.Status
DAY = dt.timedelta(days=1)


@pytest.fixture(autouse=True)
def batches_kept_30_days(settings):
    """Finished batches kept 30 days: partitions of recipients are made only then."""
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "RETENTION_BATCHES_DAYS": 30}


@pytest.fixture
def partitioned(transactional_db):
    """A partitioned recipient table, as migrate leaves a new install (migration 0035), or
    as the conversion makes it (SCHEDULER_TEST_PLAIN_JOB_TABLE=1), then as found: the
    partitions a test made are dropped (the test database's flush follows)."""
    if recipient_partitions.is_partitioned():
        found = set(recipient_partitions.range_partitions())
        yield
        with connection.cursor() as cursor:
            for partition in set(recipient_partitions.range_partitions()) - found:
                cursor.execute("DROP TABLE %s" % partition.name)
        return
    recipient_partitions.convert()
    try:
        yield
    finally:
        recipient_partitions.revert()


@pytest.fixture
def plain(transactional_db):
    """The recipient table as one table, as an install that holds rows has it before the
    conversion; afterwards as migrate left it."""
    was_partitioned = recipient_partitions.is_partitioned()
    recipient_partitions.revert()
    try:
        yield
    finally:
        if was_partitioned:
            recipient_partitions.convert()
        else:
            recipient_partitions.revert()


def batch(status=Status.SENDING, *, recipients=2, finished_ago=None) -> SendBatch:
    finished = clock.now() - finished_ago if finished_ago is not None else None
    row = SendBatch.objects.create(
        name="news",
        subject_template="s",
        text_template="t",
        audience="tests.customers",
        expected_max_audience=100,
        status=status,
        finished_at=finished,
        status_changed_at=finished,
    )
    Recipient.objects.bulk_create(
        Recipient(batch=row, recipient_key=str(n), address="r%s@example.com" % n)
        for n in range(recipients)
    )
    return row


def where(row: Recipient | SendBatch) -> str:
    """Return the partition that holds ``row`` (a recipient, or a batch's first one)."""
    pk = row.pk if isinstance(row, Recipient) else row.recipients.first().pk
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM %s WHERE id = %%s" % Recipient._meta.db_table,
            [pk],
        )
        return cursor.fetchone()[0]


def partition_of(row: SendBatch) -> recipient_partitions.Partition:
    (partition,) = [p for p in recipient_partitions.range_partitions() if p.first <= row.pk < p.end]
    return partition


def batch_ids_past(partition: recipient_partitions.Partition) -> None:
    """Have the next batch's id be past ``partition``'s range (batches created meanwhile)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(%s, %s)", [id_sequence(SendBatch._meta.db_table)[0], partition.end]
        )


def exists(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [table])
        return cursor.fetchone()[0] is not None


def test_migrate_partitions_the_recipient_table_of_a_new_install(monkeypatch):
    monkeypatch.delenv("SCHEDULER_TEST_PLAIN_JOB_TABLE", raising=False)  # a new install

    def state(url: str) -> tuple[bool, list[str], bool]:
        """(partitioned, the recipients' keys, whether feedback has its foreign key)."""
        with psycopg.connect(url) as db:
            return (
                db.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table "
                    "WHERE partrelid = 'scheduler_app_recipient'::regclass)"
                ).fetchone()[0],
                [row[0] for row in db.execute("SELECT recipient_key FROM scheduler_app_recipient")],
                db.execute(
                    "SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE contype = 'f' AND "
                    "conrelid = 'scheduler_app_feedbackevent'::regclass AND "
                    "confrelid = 'scheduler_app_recipient'::regclass)"
                ).fetchone()[0],
            )

    with scratch_database("recipients") as url:
        migrate_database(url, "scheduler_app")
        with psycopg.connect(url) as db:
            (batch_id,) = db.execute(
                "INSERT INTO scheduler_app_sendbatch (name, subject_template, text_template, "
                "html_template, audience, audience_params, expected_max_audience, seed_list, "
                "seed_context, timezone, undo_window, provider, rate_limit_key, status, "
                "status_reason, sent, failed, skipped, lane_errors, dry_run_fingerprint, "
                "dry_run_report, dry_run_summary, seed_fingerprint, stale_send_allowed, "
                "created_at) VALUES ('n', 's', 't', '', 'a', '{}', 1, '[]', '{}', 'UTC', "
                "'0', 'email', 'email', 'sending', '', 0, 0, 0, 0, '', '', '{}', '', false, "
                "now()) RETURNING id"
            ).fetchone()
            db.execute(
                "INSERT INTO scheduler_app_recipient (batch_id, recipient_key, address, "
                "timezone, context, is_seed, status, attempts, claimed_by, "
                "provider_message_id, last_error) VALUES (%s, 'k', 'a@example.com', '', "
                "'{}', false, 'pending', 0, '', '', '')",
                [batch_id],
            )
            # An event recorded while its recipient was being pruned: no constraint now.
            db.execute(
                "INSERT INTO scheduler_app_feedbackevent (event_id, kind, source, address, "
                "message, detail, occurred_at, recorded_at, recipient_id) VALUES ('e', "
                "'complaint', 'webhook', 'a@example.com', '', '', now(), now(), 999999)"
            )
        assert state(url) == (True, ["k"], False)

        migrate_database(url, "scheduler_app", "0034")  # back: one table, its rows kept
        assert state(url) == (False, ["k"], True)
        with psycopg.connect(url) as db:  # unlinked before the constraint came back
            assert db.execute(
                "SELECT recipient_id FROM scheduler_app_feedbackevent"
            ).fetchall() == [(None,)]

        migrate_database(url, "scheduler_app")  # it holds rows: scheduler_partition's work
        assert state(url) == (False, ["k"], False)


def test_converting_keeps_every_recipient_and_new_batches_go_to_partitions(plain):
    before = batch()
    recipient_partitions.convert()

    assert where(before) == recipient_partitions.BEFORE
    assert sorted(before.recipients.values_list("recipient_key", flat=True)) == ["0", "1"]
    after = batch()
    assert where(after) == partition_of(after).name
    # Past the batches the before partition keeps for those created while it converted.
    assert after.pk >= before.pk + recipient_partitions.CONVERSION_MARGIN
    assert min(after.recipients.values_list("pk", flat=True)) > max(
        before.recipients.values_list("pk", flat=True)
    )
    with pytest.raises(IntegrityError), transaction.atomic():  # once per batch, still
        Recipient.objects.create(batch=after, recipient_key="0", address="again@example.com")
    with connection.cursor() as cursor:  # a partition is stored as the table was
        cursor.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [partition_of(after).name]
        )
        assert cursor.fetchone()[0] == ["fillfactor=50"]
    assert id_sequence(Recipient._meta.db_table)[0] == "public.scheduler_app_recipient_id_seq"


def explain(sql: str, params: dict) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_a_lanes_statements_read_only_their_batchs_partition(partitioned):
    fresh_partition(1)
    sending = batch()
    recipient = sending.recipients.first()
    params = {
        "marked": recipient.pk,
        "status": "sent",
        "sent_at": clock.now(),
        "message_id": "m",
        "error": None,
        "next_attempt_at": None,
        "refund": 0,
        "begin": recipient.pk,
        "ids": [recipient.pk],
        "claim": "lane",
        "claim_for": dt.timedelta(minutes=1),
        "batch": sending.pk,
        "frozen": None,
        "limit": 10,
    }
    outcomes = [[recipient.pk], ["sent"], [clock.now()], ["m"], [None], [None], [0]]
    # MARK_AND_BEGIN's parameters: the outcomes, batch, claim, batch, claim, frozen clock,
    # frozen clock, claim period, ids, batch, claim (MARK_RECIPIENTS: up to the first clock).
    positional = [*outcomes, sending.pk, "lane", sending.pk, "lane", None]
    read = set()
    for sql, values in (
        (statements.CLAIM_RECIPIENTS, params),
        (statements.MARK_ONE_AND_BEGIN, params),
        (statements.BEGIN_RECIPIENTS, params),
        (statements.EXTEND_CLAIMS, params),
        (statements.MARK_RECIPIENTS, positional),
        (
            statements.MARK_AND_BEGIN,
            [*positional, None, dt.timedelta(minutes=1), [recipient.pk], sending.pk, "lane"],
        ),
    ):
        plan = explain(sql, values)
        read |= set(re.findall(r" on (scheduler_app_recipient_\w+)", plan))
        assert read == {partition_of(sending).name}, (sql, plan)


def fresh_partition(width: int) -> recipient_partitions.Partition:
    """Return a new partition for the next ``width`` batches: as a prune makes them after
    ``width`` batches were created in an interval."""
    for _ in range(width - SendBatch.objects.count()):
        batch(Status.DRAFT, recipients=0)
    recipient_partitions.ensure_partitions()
    batch_ids_past(recipient_partitions.range_partitions()[-1])
    (partition, *_) = recipient_partitions.ensure_partitions()
    assert partition.end - partition.first == width
    with connection.cursor() as cursor:  # the batches created next fall in it
        cursor.execute(
            "SELECT setval(%s, %s)",
            [id_sequence(SendBatch._meta.db_table)[0], partition.first - 1],
        )
    return partition


def finished_in_one_partition(count: int) -> list[SendBatch]:
    """Return ``count`` batches that finished 31 days ago, in one partition whose range
    no new batch can fall in any more."""
    partition = fresh_partition(count)
    batches = [batch(Status.COMPLETED, finished_ago=31 * DAY) for _ in range(count)]
    assert {partition_of(row) for row in batches} == {partition}
    batch_ids_past(partition)
    return batches


def test_retention_drops_a_partition_of_finished_batches_whole(partitioned):
    finished = finished_in_one_partition(2)
    partition = partition_of(finished[0])
    marker = finished[0].recipients.first()
    event = FeedbackEvent.objects.create(
        event_id="e1", kind="complaint", source="webhook", address=marker.address, recipient=marker
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE %s" % partition.name)

    run = prune(clock.now())

    assert not exists(partition.name)
    assert not SendBatch.objects.filter(pk__in=[row.pk for row in finished]).exists()
    event.refresh_from_db()
    assert (event.recipient_id, event.address) == (None, marker.address)
    # From the statistics: the drop reads no recipient; none went one by one.
    assert run.counts[PARTITIONED_RECIPIENTS] == 4
    assert (run.counts["recipients"], run.counts["batches"]) == (0, 2)


def test_a_batch_still_sending_keeps_its_partition_and_a_draft_without_recipients_does_not(
    partitioned,
):
    partition = fresh_partition(3)
    finished = batch(Status.COMPLETED, finished_ago=31 * DAY)
    sending = batch(Status.SENDING)
    draft = batch(Status.DRAFT, recipients=0)
    assert partition_of(finished) == partition_of(sending) == partition_of(draft) == partition
    # A seed send of the draft: its marker does not keep the partition.
    Recipient.objects.create(
        batch=draft, recipient_key="seed:x:a@example.com", address="a@example.com", is_seed=True
    )
    batch_ids_past(partition)

    run = prune(clock.now())
    assert exists(partition.name)
    # The finished batch waits for its partition rather than going row by row.
    assert finished.recipients.count() == 2 and sending.recipients.count() == 2
    assert run.counts[PARTITIONED_RECIPIENTS] == 0

    SendBatch.objects.filter(pk=sending.pk).update(
        status=Status.CANCELLED, status_changed_at=clock.now() - 31 * DAY
    )
    prune(clock.now())
    assert not exists(partition.name)
    assert not SendBatch.objects.filter(pk__in=[finished.pk, sending.pk]).exists()

    # The draft sent at last: its audience goes to the overflow partition.
    Recipient.objects.create(batch=draft, recipient_key="late", address="late@example.com")
    assert where(draft) == recipient_partitions.OVERFLOW


def test_a_freeze_that_commits_before_the_drop_keeps_the_partition(partitioned):
    """The drop checks the batches again with the table locked: recipients frozen after
    the prune found the partition expired are not dropped with it."""
    partition = fresh_partition(2)
    finished = batch(Status.COMPLETED, finished_ago=31 * DAY)
    scheduled = batch(Status.SCHEDULED, recipients=0)
    assert partition_of(finished) == partition_of(scheduled) == partition
    batch_ids_past(partition)
    done = finished_batches(clock.now() - 30 * DAY)
    assert partition in recipient_partitions.expired(done)
    Recipient.objects.create(batch=scheduled, recipient_key="k", address="k@example.com")

    assert recipient_partitions.drop(partition, done) is False
    assert exists(partition.name) and scheduled.recipients.count() == 1


def test_recipients_in_the_overflow_go_row_by_row(partitioned):
    recipient_partitions.ensure_partitions()
    last = recipient_partitions.range_partitions()[-1]
    batch_ids_past(last)  # a burst of batches past the partitions made
    overflowed = batch(Status.FAILED, finished_ago=31 * DAY, recipients=3)
    assert where(overflowed) == recipient_partitions.OVERFLOW

    run = prune(clock.now())

    assert not SendBatch.objects.filter(pk=overflowed.pk).exists()
    assert run.counts["recipients"] == 3
    assert run.outcome == PruneRun.Outcome.PRUNED


def test_a_prune_makes_partitions_ahead_past_the_overflow(partitioned):
    recipient_partitions.ensure_partitions()
    batch_ids_past(recipient_partitions.range_partitions()[-1])
    overflowed = batch()
    before = set(recipient_partitions.range_partitions())

    prune(clock.now())

    made = sorted(set(recipient_partitions.range_partitions()) - before, key=lambda p: p.first)
    assert made and made[0].first > overflowed.pk  # attaching them read no row of it
    assert where(overflowed) == recipient_partitions.OVERFLOW
    with connection.cursor() as cursor:  # the overflow takes any batch again
        cursor.execute(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'c'"
            " AND conname = %s",
            [recipient_partitions.OVERFLOW, recipient_partitions.OVERFLOW_CHECK],
        )
        assert cursor.fetchone()[0] == 0


def test_a_partition_another_run_attached_is_kept_with_its_recipients(partitioned):
    """Two maintenance runs (a prune, scheduler_partition) may make the same partition:
    the second must not take it for a try cut short."""
    partition = fresh_partition(1)
    sending = batch()
    assert partition_of(sending) == partition

    made = partitioning.make_and_attach(
        recipient_partitions.RECIPIENT,
        partition.name,
        [f"CREATE TABLE {partition.name} (LIKE {recipient_partitions.BEFORE})"],
        f"ALTER TABLE {recipient_partitions.RECIPIENT} ATTACH PARTITION {partition.name}"
        f" FOR VALUES FROM ({partition.first}) TO ({partition.end})",
    )

    assert made is False and sending.recipients.count() == 2


def test_the_command_partitions_the_recipient_table_and_says_so(plain, capsys):
    call_command("scheduler_partition", "--dry-run")
    assert "Would partition the recipient table" in capsys.readouterr().out
    assert not recipient_partitions.is_partitioned()

    call_command("scheduler_partition")
    assert "The recipient table is partitioned; its rows are in scheduler_app_recipient_before" in (
        capsys.readouterr().out
    )
    assert recipient_partitions.is_partitioned()


def test_batches_kept_for_ever_get_no_partitions_and_share_the_overflow(partitioned, settings):
    """Partitions that retention never drops would only add up: every lane's statement
    would carry them."""
    recipient_partitions.ensure_partitions()
    batch_ids_past(recipient_partitions.range_partitions()[-1])
    settings.SCHEDULER_APP = {**settings.SCHEDULER_APP, "RETENTION_BATCHES_DAYS": None}
    before = recipient_partitions.range_partitions()

    prune(clock.now())

    assert recipient_partitions.range_partitions() == before
    assert where(batch()) == recipient_partitions.OVERFLOW


def test_a_conversion_that_fails_leaves_the_table_as_it_was(plain):
    """The CHECK the conversion validates first goes again: left on the table, it would
    refuse the recipients of every batch past its bound."""
    with connection.cursor() as cursor:  # the name the table would take
        cursor.execute("CREATE TABLE %s (id int)" % recipient_partitions.BEFORE)
    try:
        with pytest.raises(ProgrammingError):
            recipient_partitions.convert()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE %s" % recipient_partitions.BEFORE)

    assert not recipient_partitions.is_partitioned()
    batch_ids_past(
        recipient_partitions.Partition("", 0, 10 * recipient_partitions.CONVERSION_MARGIN)
    )
    batch()  # past the bound the CHECK had
