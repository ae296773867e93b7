"""The training corpus of the bundled model, one module per job; scripts/make_corpus.py is
its entry point and the name the other scripts import it by. Each module imports only those
above it:

- ``pools.py``: the pools of facts (names, name characters, cities, jobs, hobbies; the small
  tasks' tables) and ``DEMO_NAMES``, the demo's names that are never generated.
- ``values.py``: the values of facts, generated and spelled: ``person_name`` (held out by
  ``is_held_out``), ``person_facts`` (city, e-mail, phone, occupation, hobbies), ``_city``,
  ``_email``, ``_phone``, ``_word``, dates, ``_join``.
- ``phrasings.py``: the fixed (training, held-out) phrasings: facts, openers, systems,
  strict and loose instructions, ``_pick``; the course's running example (``SEED_*``).
- ``example_format.py``: an example's dict, ``_dumps`` (the answers' JSON), ``unfence``,
  ``to_messages``.
- ``numerals.py``: ``zh_number`` and ``numeral_drill_example``.
- ``vocab_tokens.py``: the tokenizer's letter tokens (``vocab_letter_tokens``).
- ``made_up_phrasings.py``: made-up connecting words, ``composed_opener``,
  ``made_up_connector``.
- ``paragraphs.py``: ``_paragraph``, a text about a person (late names, distractors).
- ``extraction.py``: ``person_example``, ``extraction_request`` (the request and answer
  around a text), ``KEY_ORDER`` and ``FIELD_SCHEMAS``.
- ``document_kinds.py``: ``document_example``, a text in one of ``DOCUMENT_KINDS`` (e-mails,
  chats, forms, a CSV row, notices, sick notes, text messages...) with its request and answer.
- ``long_documents.py``: ``long_document_example``, a long prompt (rules and a schema, the
  facts among filler) as the extraction service sends.
- ``small_tasks.py``: dates, e-mails, IPv4, phones, colours, Q&A, prose.
- ``tool_calls.py``: ``TOOL_FAMILIES``, ``make_tool``, ``tool_example``.
- ``copy_requests.py``: ``copy_example``.
- ``mix.py``: ``make_corpus``, the main corpus (``TASKS``: each maker's weight).
- ``heldout.py``: ``heldout_extraction_prompts``, ``heldout_tool_prompts``.
- ``drills.py``: the copy drills: ``copy_drill_corpus``, ``copy_drill_example``,
  ``random_string``, ``vocab_string``, ``rare_letter_tokens`` (measured on ``make_corpus``).
"""
