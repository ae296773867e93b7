"""The tool-use examples: the tool families (their names, parameters, requests, results and
replies), one tool drawn from a family, and a conversation that calls a listed tool with
arguments copied from the request, answers without one, or replies with a tool's result."""

from __future__ import annotations

import random

from .example_format import _dumps
from .pools import ZH_GIVEN
from .small_tasks import qa_example
from .values import _city, _email, _phone, _word, person_name


# A tool family: the names it goes by, its parameters (name -> JSON Schema, in order;
# a tuple of alternative spellings for a parameter's name), and how to ask for it.
# Requests are (English, Chinese) templates whose {placeholders} are the arguments.
def _tool(names, description, params, required, requests, result, reply):
    return {
        "names": names,
        "description": description,
        "params": params,
        "required": required,
        "requests": requests,
        "result": result,
        "reply": reply,
    }


WEATHER_ZH = {"sunny": "晴", "cloudy": "多云", "rainy": "有雨", "windy": "有风", "snowy": "下雪"}
TOOL_FAMILIES = [
    _tool(
        ["get_weather", "weather_lookup", "current_weather"],
        "Get the current weather in a city.",
        {("city", "location"): {"type": "string"}},
        ["city"],
        (
            [
                "What's the weather in {city}?",
                "Is it raining in {city} right now?",
                "How warm is it in {city} today?",
                "Tell me the weather in {city}.",
                "Weather report for {city}?",
                "Do I need an umbrella in {city} today?",
                "What is the temperature in {city} now?",
                "Look up the current weather in {city}.",
                "Check the weather for {city}, please.",
            ],
            [
                "{city}今天天气怎么样？",
                "查一下{city}的天气。",
                "{city}的天气如何？",
                "帮我看看{city}的气温。",
                "{city}今天下雨吗？",
                "查询{city}当前天气。",
                "{city}现在冷不冷？",
            ],
        ),
        lambda rng, a: {"temperature": rng.randint(-10, 38), "condition": rng.choice(list(WEATHER_ZH))},
        (
            lambda a, r: f"It is {r['temperature']} degrees and {r['condition']} in {a['city']}.",
            lambda a, r: f"{a['city']}现在{r['temperature']}度，{WEATHER_ZH[r['condition']]}。",
        ),
    ),
    _tool(
        ["send_email", "email_send", "compose_email"],
        "Send an email.",
        {("to", "recipient"): {"type": "string"}, "subject": {"type": "string"}},
        ["to", "subject"],
        (
            [
                'Send an email to {to} with the subject "{subject}".',
                'Email {to} about "{subject}".',
                'Write an email to {to}, subject "{subject}".',
                'Mail {to} with the subject line "{subject}".',
                'Send {to} an email titled "{subject}".',
                'Drop an email to {to}: "{subject}".',
                'Please write to {to}, subject: "{subject}".',
            ],
            [
                "给{to}发一封邮件，主题是“{subject}”。",
                "写封邮件给{to}，主题“{subject}”。",
                "给{to}发邮件，主题：{subject}。",
                "发一封主题为“{subject}”的邮件给{to}。",
                "发邮件到{to}，标题“{subject}”。",
            ],
        ),
        lambda rng, a: {"status": "sent"},
        (lambda a, r: f"Done: the email to {a['to']} has been sent.", lambda a, r: f"邮件已发送到{a['to']}。"),
    ),
    _tool(
        ["book_table", "reserve_table", "make_reservation"],
        "Book a table at a restaurant.",
        {"restaurant": {"type": "string"}, ("people", "party_size"): {"type": "integer"}, "time": {"type": "string"}},
        ["restaurant", "people"],
        (
            [
                "Book a table for {people} at {restaurant} at {time}.",
                "Reserve {restaurant} for {people} people at {time}.",
                "I need a table at {restaurant} for {people} at {time}.",
                "Make a reservation at {restaurant}: {people} people, {time}.",
                "Table for {people} at {restaurant}, {time}, please.",
                "Book {restaurant} at {time} for {people} of us.",
                "Can you get us a table at {restaurant}? We are {people}, at {time}.",
            ],
            [
                "帮我在{restaurant}订{people}个人的位子，时间{time}。",
                "在{restaurant}订一张{people}人桌，{time}。",
                "帮我订{restaurant}的桌子，{people}个人，{time}。",
                "{time}在{restaurant}订{people}人的餐位。",
                "预订{restaurant}，{people}位，{time}。",
            ],
        ),
        lambda rng, a: {"confirmation": "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))},
        (
            lambda a, r: f"Your table at {a['restaurant']} is booked; the confirmation code is {r['confirmation']}.",
            lambda a, r: f"已订好{a['restaurant']}，确认码是{r['confirmation']}。",
        ),
    ),
    _tool(
        ["convert_currency", "currency_convert", "exchange"],
        "Convert an amount between currencies.",
        {
            "amount": {"type": "integer"},
            ("from_currency", "source"): {"type": "string"},
            ("to_currency", "target"): {"type": "string"},
        },
        ["amount", "from_currency", "to_currency"],
        (
            [
                "How much is {amount} {from_currency} in {to_currency}?",
                "What is {amount} {from_currency} worth in {to_currency}?",
                "Change {amount} {from_currency} into {to_currency}.",
                "Exchange {amount} {from_currency} for {to_currency}, how much?",
                "{amount} {from_currency} to {to_currency}, please convert.",
                "Convert {amount} {from_currency} to {to_currency}.",
            ],
            [
                "{amount}{from_currency}换成{to_currency}是多少？",
                "{amount}{from_currency}能换多少{to_currency}？",
                "帮我把{amount}{from_currency}换算成{to_currency}。",
                "{amount} {from_currency}折合多少{to_currency}？",
                "把{amount} {from_currency}兑换成{to_currency}。",
            ],
        ),
        lambda rng, a: {"result": round(a["amount"] * rng.uniform(0.1, 9), 2)},
        (
            lambda a, r: f"{a['amount']} {a['from_currency']} is {r['result']} {a['to_currency']}.",
            lambda a, r: f"{a['amount']} {a['from_currency']}等于{r['result']} {a['to_currency']}。",
        ),
    ),
    _tool(
        ["set_reminder", "create_reminder", "remind_me"],
        "Create a reminder.",
        {("text", "message"): {"type": "string"}, "time": {"type": "string"}},
        ["text", "time"],
        (
            [
                "Remind me to {text} at {time}.",
                "Please remind me at {time} to {text}.",
                "At {time}, remind me to {text}.",
                "Create a reminder for {time}: {text}.",
                "Don't let me forget to {text} at {time}.",
                "Set a reminder at {time}: {text}.",
            ],
            [
                "{time}提醒我{text}。",
                "{time}记得提醒我{text}。",
                "帮我设个提醒，{time}{text}。",
                "提醒我{time}{text}。",
                "设置一个提醒：{time}{text}。",
            ],
        ),
        lambda rng, a: {"ok": True},
        (
            lambda a, r: f"I will remind you to {a['text']} at {a['time']}.",
            lambda a, r: f"好的，{a['time']}会提醒你{a['text']}。",
        ),
    ),
    _tool(
        ["find_contact", "lookup_person", "search_contacts"],
        "Look up a person's contact details.",
        {("name", "person"): {"type": "string"}},
        ["name"],
        (
            [
                "Find the contact details of {name}.",
                "What is {name}'s email address?",
                "Get me the contact details for {name}.",
                "How can I reach {name}?",
                "Search my contacts for {name}.",
                "Find {name}'s phone number.",
                "Look up {name} in my contacts.",
            ],
            [
                "查一下{name}的联系方式。",
                "帮我找{name}的联系方式。",
                "{name}的电话是多少？",
                "在通讯录里查{name}。",
                "{name}的邮箱是什么？",
            ],
        ),
        lambda rng, a: {"email": _email(rng), "phone": _phone(rng, False)},
        (
            lambda a, r: f"{a['name']} can be reached at {r['email']} or {r['phone']}.",
            lambda a, r: f"{a['name']}的邮箱是{r['email']}，电话是{r['phone']}。",
        ),
    ),
    _tool(
        ["get_stock_price", "stock_quote", "share_price"],
        "Get the latest price of a stock.",
        {("symbol", "ticker"): {"type": "string"}},
        ["symbol"],
        (
            [
                "What is {symbol} trading at?",
                "Get me the stock price of {symbol}.",
                "What is the share price of {symbol}?",
                "Quote {symbol} for me.",
                "Check the stock {symbol}.",
                "Latest price of {symbol} stock?",
                "How is {symbol} doing today?",
            ],
            [
                "{symbol}的股价是多少？",
                "{symbol}现在股价多少？",
                "帮我查{symbol}的最新股价。",
                "看一下{symbol}的股票价格。",
                "查询股票{symbol}的价格。",
            ],
        ),
        lambda rng, a: {"price": round(rng.uniform(1, 900), 2)},
        (
            lambda a, r: f"{a['symbol']} is trading at {r['price']}.",
            lambda a, r: f"{a['symbol']}现在的价格是{r['price']}。",
        ),
    ),
    _tool(
        ["add_numbers", "calculator_add", "sum_numbers"],
        "Add two integers.",
        {"a": {"type": "integer"}, "b": {"type": "integer"}},
        ["a", "b"],
        (
            [
                "Use the calculator to add {a} and {b}.",
                "Add {a} and {b} with the calculator.",
                "Calculate {a} + {b} for me.",
                "Sum {a} and {b}, please.",
                "What is {a} plus {b}? Use the tool.",
            ],
            ["用计算器算一下{a}加{b}。", "帮我算{a}加{b}。", "{a}加上{b}等于多少？用计算器。", "调用工具计算{a}+{b}。"],
        ),
        lambda rng, a: {"sum": a["a"] + a["b"]},
        (lambda a, r: f"{a['a']} + {a['b']} = {r['sum']}.", lambda a, r: f"{a['a']}加{a['b']}等于{r['sum']}。"),
    ),
    _tool(
        ["play_song", "play_music", "start_playback"],
        "Play a song.",
        {("title", "song"): {"type": "string"}, "artist": {"type": "string"}},
        ["title"],
        (
            [
                "Play {title} by {artist}.",
                "I want to hear {title} by {artist}.",
                "Start playing {title} by {artist}.",
                "Play the song {title} from {artist}.",
                'Put on "{title}" from {artist}.',
            ],
            [
                "播放{artist}的《{title}》。",
                "我想听{artist}的《{title}》。",
                "放一首{artist}的{title}。",
                "来一首{artist}的{title}。",
            ],
        ),
        lambda rng, a: {"playing": True},
        (
            lambda a, r: f"Now playing {a['title']} by {a['artist']}.",
            lambda a, r: f"正在播放{a['artist']}的{a['title']}。",
        ),
    ),
    _tool(
        ["translate_text", "translate", "translator"],
        "Translate text into another language.",
        {"text": {"type": "string"}, ("target_language", "language"): {"type": "string"}},
        ["text", "target_language"],
        (
            [
                'Translate "{text}" into {target_language}.',
                'What is "{text}" in {target_language}?',
                'Please translate "{text}" to {target_language}.',
                'Say "{text}" in {target_language} for me.',
                'How do you say "{text}" in {target_language}?',
            ],
            [
                "“{text}”用{target_language}怎么说？",
                "帮我把“{text}”译成{target_language}。",
                "把“{text}”翻译成{target_language}。",
            ],
        ),
        lambda rng, a: {"translation": _word(rng).lower()},
        (
            lambda a, r: f'In {a["target_language"]}, "{a["text"]}" is "{r["translation"]}".',
            lambda a, r: f"翻译结果：{r['translation']}",
        ),
    ),
]
# Requests held out of training: one phrasing per family and language is evaluation-only.
TOOL_HELD_OUT_REQUESTS = 1
CURRENCIES = ["USD", "EUR", "CNY", "JPY", "GBP", "CHF", "CAD", "AUD", "SEK", "INR", "KRW", "BRL"]
LANGUAGES = (
    ["French", "German", "Spanish", "Japanese", "Italian", "Korean", "Dutch"],
    ["法语", "德语", "西班牙语", "日语", "意大利语", "韩语"],
)
TASKS_TO_REMIND = (
    [
        "call mom",
        "buy milk",
        "water the plants",
        "pay the rent",
        "feed the cat",
        "send the report",
        "book a dentist appointment",
        "pick up the kids",
    ],
    ["给妈妈打电话", "买牛奶", "浇花", "交房租", "喂猫", "交报告", "去取快递", "开会"],
)
SUBJECT_WORDS = [
    "Meeting",
    "Budget",
    "Trip",
    "Invoice",
    "Party",
    "Project",
    "Report",
    "Lunch",
    "Update",
    "Plan",
    "Review",
    "Contract",
    "Schedule",
    "Order",
    "Visit",
]
ZH_SUBJECT_WORDS = ["会议", "预算", "出差", "发票", "聚会", "项目", "报告", "午餐", "计划", "合同", "安排", "订单"]
PHRASES = [
    "good morning",
    "thank you",
    "where is the station",
    "see you tomorrow",
    "I love this city",
    "happy birthday",
]


def _arg_values(rng: random.Random, family: dict, zh: bool, held_out: bool) -> dict:
    """Random argument values for a family's canonical parameter names, copyable from a request."""
    times = f"{rng.randint(7, 21)}:{rng.choice(['00', '15', '30', '45'])}"
    pools = {
        "city": lambda: _city(rng, zh),
        "to": lambda: _email(rng),
        "subject": lambda: (
            (rng.choice(ZH_SUBJECT_WORDS) + rng.choice(ZH_SUBJECT_WORDS))
            if zh
            else f"{rng.choice(SUBJECT_WORDS)} {rng.choice(['on', 'for', 'about'])} {_word(rng, (1, 2))}"
        ),
        "restaurant": lambda: (
            rng.choice(["", "老", "小"]) + "".join(rng.sample(ZH_GIVEN, 2)) + rng.choice(["饭店", "餐厅", "面馆"])
            if zh
            else _word(rng) + rng.choice([" Bistro", " Grill", " Kitchen", "'s", ""])
        ),
        "people": lambda: rng.randint(1, 12),
        "time": lambda: times,
        "amount": lambda: rng.choice([rng.randint(1, 100), rng.randint(100, 5000)]),
        "from_currency": lambda: rng.choice(CURRENCIES),
        "to_currency": lambda: rng.choice(CURRENCIES),
        "text": lambda: (
            rng.choice(TASKS_TO_REMIND[1] if zh else TASKS_TO_REMIND[0])
            if family["names"][0] == "set_reminder"
            else rng.choice(PHRASES)
        ),
        "name": lambda: person_name(rng, zh, held_out),
        "symbol": lambda: "".join(rng.choice("ABCDEFGHIKLMNOPRSTUVWXYZ") for _ in range(rng.randint(2, 4))),
        "a": lambda: rng.randint(0, 999),
        "b": lambda: rng.randint(0, 999),
        "title": lambda: (
            rng.choice(["", "我的"]) + "".join(rng.sample(ZH_GIVEN, 2))
            if zh
            else f"{_word(rng, (1, 2))} {rng.choice(['Road', 'Song', 'Nights', 'Heart', 'Rain'])}"
        ),
        "artist": lambda: person_name(rng, zh, held_out),
        "target_language": lambda: rng.choice(LANGUAGES[1] if zh else LANGUAGES[0]),
    }
    values = {}
    for key in family["params"]:
        canonical = key[0] if isinstance(key, tuple) else key
        values[canonical] = pools[canonical]()
    if family["names"][0] == "convert_currency":
        values["to_currency"] = rng.choice([c for c in CURRENCIES if c != values["from_currency"]])
    return values


def make_tool(rng: random.Random, family: dict) -> tuple[dict, dict]:
    """One OpenAI tool dict drawn from ``family`` (its name, parameter spellings, sometimes a
    generated prefix such as ``velor_get_weather``) and the map canonical -> spelled parameter."""
    name = rng.choice(family["names"])
    if rng.random() < 0.3:
        name = _word(rng, (1, 2)).lower() + "_" + name  # a name only the tool list can tell
    spelled, properties = {}, {}
    for key, schema in family["params"].items():
        options = key if isinstance(key, tuple) else (key,)
        spelled[options[0]] = rng.choice(options)
        properties[spelled[options[0]]] = dict(schema)
    required = [spelled[k] for k in family["required"]]
    tool = {
        "type": "function",
        "function": {
            "name": name,
            "description": family["description"],
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
    return tool, spelled


# A share of training requests says what it wants in the words of the chosen tool's own
# description or name ("Get the current weather in a city: Oslo", "Use velor_send_email
# ..."), which no other listed tool shares: matching the request to the tool list is then
# learnable, the skill the held-out requests (their own phrasings only) test.
TOOL_ECHO_REQUESTS = 0.25


def _echo_request(rng: random.Random, family: dict, tool_name: str, values: dict, zh: bool) -> str:
    """A request made of the tool's description (or its name) and its argument values."""
    args = ("，" if zh else ", ").join(f"{k} {v}" for k, v in values.items())
    if rng.random() < 0.5:
        return f"{family['description'].rstrip('.')}: {args}." if not zh else f"{family['description']}（{args}）"
    return f"Use {tool_name} with {args}." if not zh else f"用{tool_name}：{args}。"


def _request(rng: random.Random, family: dict, values: dict, zh: bool, held_out: bool, tool_name: str = "") -> str:
    templates = family["requests"][1 if zh else 0]
    train, held = templates[:-TOOL_HELD_OUT_REQUESTS], templates[-TOOL_HELD_OUT_REQUESTS:]
    if len(train) == 0:
        train = held
    if not held_out and tool_name and rng.random() < TOOL_ECHO_REQUESTS:
        return _echo_request(rng, family, tool_name, values, zh)
    return rng.choice(held if held_out else train).format(**values)


def tool_example(rng: random.Random, held_out: bool = False) -> dict:
    """A conversation with 1-5 tools in the system turn. The answer is a tool call whose
    arguments are copied from the request (sometimes two calls), or a plain answer when
    no tool fits, or - after a call and its ``tool`` result - a reply that uses the result."""
    zh = rng.random() < 0.5
    n_tools = rng.choices([1, 2, 3, 4, 5], [4, 3, 2, 1, 1])[0]
    families = rng.sample(TOOL_FAMILIES, n_tools)
    tools, spellings = zip(*(make_tool(rng, f) for f in families))
    system = rng.choice([None, None, "You are a helpful assistant.", "你是一个乐于助人的助手。"])
    kind = rng.choices(["call", "parallel", "no_tool", "reply"], [0.62, 0.06, 0.12, 0.20])[0]
    if kind == "no_tool":
        plain = qa_example(rng)
        return {
            "task": "tool_none",
            "system": system,
            "tools": list(tools),
            "user": plain["user"],
            "assistant": plain["assistant"],
        }
    calls, requests, results = [], [], []
    n_calls = 2 if kind == "parallel" else 1
    picks = [0, 0] if n_calls == 2 and rng.random() < 0.5 else rng.sample(range(n_tools), min(n_calls, n_tools))
    for i in picks:
        values = _arg_values(rng, families[i], zh, held_out)
        requests.append(_request(rng, families[i], values, zh, held_out, tools[i]["function"]["name"]))
        arguments = {spellings[i][k]: v for k, v in values.items()}
        calls.append({"type": "function", "function": {"name": tools[i]["function"]["name"], "arguments": arguments}})
        results.append((families[i], values))
    user = ("另外，" if zh else " Also: ").join(requests) if len(requests) > 1 else requests[0]
    if kind != "reply":
        # (a "parallel" draw with a single tool listed makes one call)
        return {
            "task": "tool_call" if len(calls) == 1 else "tool_parallel",
            "system": system,
            "tools": list(tools),
            "user": user,
            "assistant": "",
            "tool_calls": calls,
        }
    family, values = results[0]
    result = family["result"](rng, values)
    history = [{"role": "assistant", "content": "", "tool_calls": calls}, {"role": "tool", "content": _dumps(result)}]
    return {
        "task": "tool_reply",
        "system": system,
        "tools": list(tools),
        "user": user,
        "history": history,
        "assistant": family["reply"][1 if zh else 0](values, result),
    }
