from scheduler_app.conf import DEFAULTS, DESCRIPTIONS


def test_every_setting_has_a_description_and_every_description_a_setting():
    assert list(DESCRIPTIONS) == list(DEFAULTS)


def test_descriptions_are_sentences():
    for key, text in DESCRIPTIONS.items():
        assert text.strip() and text.rstrip().endswith((".", "...")), key
