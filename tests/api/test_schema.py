"""The OpenAPI schema: served, valid, complete, and true (schemathesis fuzzes the API with it)."""

from __future__ import annotations

import datetime as dt
import json

import jsonschema
import pytest
import schemathesis
import yaml
from django.core.handlers.wsgi import WSGIHandler
from django.test import Client, override_settings
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode, checks

from scheduler_app.db import backend
from scheduler_app.models import Job, SendBatch
from tests.api.helpers import grant, make_batch

#: Examples per operation and generation mode; enough to hit every branch, quick enough for CI.
MAX_EXAMPLES = 25
#: The list operations.
LISTS = {"/api/jobs/", "/api/batches/", "/api/suppressions/"}


def stricter_than_schema(case) -> str | None:
    """Return why the server may answer this schema-valid request with a 400, or None.

    Positive data acceptance (a schema-valid request is not a 4xx) is checked for
    every other request. The exceptions, each a rule OpenAPI cannot state:
    """
    query = case.query or {}
    if case.path in LISTS and "cursor" in query:
        # The cursor is opaque: the schema gives its alphabet (a pattern), but only a
        # value the server issued in a `next`/`previous` link is a cursor.
        return "opaque cursor"
    if case.path == "/api/messages/" and isinstance(case.body, dict):
        # Django's EmailValidator is stricter than `format: email` (e.g. quoted local
        # parts, IP-literal domains), and the address must be one Django can send to.
        return "email address"
    if case.path == "/api/suppressions/" and case.method == "POST":
        # The same address rule, and the scope must be one of the caller's audiences.
        return "email address or a scope that is not the caller's"
    return None


OPERATIONS = {
    ("GET", "/api/jobs/"): {"200", "400", "401"},
    ("GET", "/api/jobs/{id}/"): {"200", "401", "404"},
    ("POST", "/api/jobs/{id}/cancel/"): {"200", "401", "403", "404", "409", "429"},
    ("POST", "/api/jobs/{id}/undo/"): {"200", "401", "403", "404", "409", "429"},
    ("GET", "/api/batches/"): {"200", "400", "401"},
    ("GET", "/api/batches/{id}/"): {"200", "401", "404"},
    ("POST", "/api/batches/{id}/pause/"): {"200", "400", "401", "403", "404", "409", "429"},
    ("POST", "/api/batches/{id}/resume/"): {"200", "401", "403", "404", "409", "429"},
    ("POST", "/api/batches/{id}/cancel/"): {"200", "401", "403", "404", "409", "429"},
    ("POST", "/api/batches/{id}/undo/"): {"200", "401", "403", "404", "409", "429"},
    ("POST", "/api/messages/"): {"201", "400", "401", "403", "429"},
    ("GET", "/api/suppressions/"): {"200", "400", "401"},
    ("POST", "/api/suppressions/"): {"200", "201", "400", "401", "403", "429"},
}


@pytest.fixture
def openapi(db) -> dict:
    GENERATOR_STATS.reset()
    response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_schema_documents_every_operation_and_its_error_responses(openapi):
    validate_schema(openapi)  # raises on an invalid OpenAPI 3 document
    assert not GENERATOR_STATS, "drf-spectacular warned or failed while generating the schema"

    assert openapi["openapi"].startswith("3.")
    documented = {
        (method.upper(), path): set(operation["responses"])
        for path, methods in openapi["paths"].items()
        for method, operation in methods.items()
    }
    assert documented == OPERATIONS
    schemas = openapi["components"]["schemas"]
    conflict = schemas["SchedulerJobConflict"]["properties"]
    assert conflict["error"] == {"$ref": "#/components/schemas/SchedulerErrorDetail"}
    assert set(schemas["SchedulerErrorDetail"]["required"]) == {"code", "message", "fields"}
    assert set(openapi["components"]["securitySchemes"]) == {"tokenAuth", "cookieAuth"}
    listing = openapi["paths"]["/api/jobs/"]["get"]
    assert {parameter["name"] for parameter in listing["parameters"]} == {
        "status",
        "task",
        "created_after",
        "created_before",
        "scheduled_after",
        "scheduled_before",
        "cursor",
        "page_size",
    }


@pytest.mark.django_db
def test_a_blank_optional_text_is_valid_in_the_schema_as_the_api_accepts_it(openapi):
    """drf-spectacular 0.30 writes "text, or blank" as oneOf, which an empty string, valid
    in both branches, fails: the fuzzer then expects a blank ``html`` to be refused."""
    components = openapi["components"]["schemas"]
    blank_message = {"to": "ann@example.com", "subject": "Hi", "text": "Hello", "html": ""}

    jsonschema.validate(blank_message, components["SchedulerMessage"])
    jsonschema.validate("", components["SchedulerMessage"]["properties"]["html"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("a\x00b", components["SchedulerMessage"]["properties"]["html"])


@pytest.mark.django_db
def test_a_text_that_str_strip_empties_is_blank_in_the_schema_as_the_api_refuses_it(openapi):
    """str.strip() removes more than ECMAScript's whitespace (U+001C to U+001F, U+0085): the
    patterns of the texts that may not be blank refuse every character it removes."""
    components = openapi["components"]["schemas"]
    message = components["SchedulerMessage"]["properties"]
    texts = [
        components["SchedulerBatchPause"]["properties"]["reason"],
        message["subject"],
        message["text"],
    ]
    whitespace = "".join(char for char in map(chr, range(0x110000)) if char.isspace())

    for text in texts:
        jsonschema.validate(" x ", text)
        for char in whitespace:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(char, text)


@pytest.mark.django_db
def test_schema_is_public_yaml_by_default_and_follows_the_mount_point():
    response = Client().get("/api/schema/")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/vnd.oai.openapi")
    assert set(yaml.safe_load(response.content)["paths"]) == {path for _, path in OPERATIONS}


@pytest.mark.django_db
@override_settings(ROOT_URLCONF="tests.api.urls_elsewhere")
def test_schema_paths_carry_whatever_prefix_the_project_chose():
    paths = json.loads(Client().get("/v2/scheduling/schema/?format=json").content)["paths"]

    assert set(paths) == {path.replace("/api/", "/v2/scheduling/") for _, path in OPERATIONS}


@pytest.mark.django_db
def test_docs_page_loads_swagger_ui_with_the_schema():
    response = Client().get("/api/docs/")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/html; charset=utf-8"
    page = response.content.decode()
    assert 'url: "../schema/?format=json"' in page
    assert "swagger-ui-bundle.js" in page
    assert Client().post("/api/docs/").status_code == 405


def fuzz(strategy, *, examples: int, token: str) -> None:
    """Send ``examples`` generated requests as the token's user; fail on any failed check."""

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(case):
        skip = [checks.positive_data_acceptance] if stricter_than_schema(case) else []
        case.call_and_validate(headers={"Authorization": token}, excluded_checks=skip)

    check()


@pytest.fixture
def jobs_in_every_state(ada, bob, make_job):
    """Ada's jobs in each state the API distinguishes, and one of Bob's."""
    jobs = [
        make_job(ada, undo_window=3600),
        make_job(ada, undo_window=3600),
        make_job(ada, delay=3600),
        make_job(ada, undo_window=0),  # window already closed
        make_job(bob, undo_window=3600),
    ]
    Job.objects.filter(pk=jobs[1].pk).update(status=Job.Status.CANCELLED)
    running = make_job(ada, delay=0)
    assert backend().claim_jobs(
        worker="w", queues=["default"], limit=1, lease=dt.timedelta(seconds=30)
    )
    finished = make_job(ada)
    Job.objects.filter(pk=finished.pk).update(status=Job.Status.SUCCEEDED)
    return [*jobs, running, finished]


@pytest.fixture
def batches_in_every_state(ada, bob):
    """Ada's batches in each state (and one started, then paused), and one of Bob's."""
    batches = [make_batch(ada, status=status) for status in SendBatch.Status.values]
    batches.append(make_batch(ada, status=SendBatch.Status.PAUSED, started=True))
    batches.append(make_batch(bob))
    return batches


# Connections are closed after each request here (as in production), so the
# data must be committed: a transactional test.
@pytest.mark.django_db(transaction=True)
@override_settings(REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"scheduler_app_write": "100000/min"}})
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzzing_finds_no_server_error_and_no_response_outside_the_schema(
    ada, jobs_in_every_state, batches_in_every_state, mode
):
    grant(ada, "resume_sendbatch")  # so that resume reaches 200 and 409 too
    grant(ada, "send_message")  # so that messages reaches 201 and 400 too
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler())
    token = "Token %s" % Token.objects.get_or_create(user=ada)[0].key
    ids = {
        "/api/jobs/": [job.pk for job in jobs_in_every_state],
        "/api/batches/": [batch.pk for batch in batches_in_every_state],
    }
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {(op.method.upper(), op.path) for op in operations} == set(OPERATIONS)
    unsatisfiable: list[str] = []

    for operation in operations:
        # Existing objects' ids too, so that the actions reach every outcome
        # (negative cases need a part to break, so there only generated ids).
        prefix = operation.path.split("{id}")[0]
        positive = "{id}" in operation.path and mode is GenerationMode.POSITIVE
        real_ids = ids[prefix] if positive else []
        for path_parameters in [None, *real_ids]:
            fixed = {"id": path_parameters} if path_parameters is not None else None
            strategy = operation.as_strategy(generation_mode=mode, path_parameters=fixed)
            examples = MAX_EXAMPLES if path_parameters is None else 3
            try:
                fuzz(strategy, examples=examples, token=token)
            except Unsatisfiable:
                # Nothing schemathesis can break but an integer path id, which
                # it often cannot negate in a URL; malformed ids have their own
                # tests (test_*_unknown_or_malformed_id_is_404).
                if mode is GenerationMode.POSITIVE or operation.path in LISTS:
                    raise
                unsatisfiable.append(operation.label)
    assert len(unsatisfiable) < len(operations), unsatisfiable
