"""Extraction examples whose text is a kind of document other than a paragraph: e-mails,
chats, forms, a CSV row, news items, diaries, CVs, minutes, notices, sick notes, text
messages... (English and Chinese, training names only). Each states some facts of one
person, the subject, among one to three other people, with titles and honorifics around
names that are never part of the answer's name; the request and answer are
extraction.py's (``extraction_request``), so the answers follow the same conventions."""

from __future__ import annotations

import random
import re

from .extraction import KEY_ORDER, extraction_request
from .numerals import en_number, zh_number
from .values import _join, _spell_date, person_facts, person_name

# Titles and honorifics written around a name (before it in English, after it in Chinese);
# the answer's name never holds one.
EN_TITLES = ["Dr.", "Prof.", "Mr.", "Ms.", "Mrs.", "Capt.", "Coach", "Sgt."]
ZH_TITLES = ["教授", "老师", "先生", "女士", "经理", "同学", "医生", "主任", "师傅"]
TITLED = 0.35  # how often the subject is called by a title somewhere in the text
# A gendered title fixes the pronoun the text uses for its person.
GENDERED = {
    "Mr.": "He",
    "Ms.": "She",
    "Mrs.": "She",
    "先生": "他",
    "女士": "她",
}

# Labels of a form's fields, several per key, so a model reads the label, not its spelling.
EN_LABELS = {
    "name": ["Name", "Full name", "Name of participant", "Applicant"],
    "age": ["Age", "Age (years)"],
    "city": ["City", "City of residence", "Town", "Location"],
    "email": ["Email", "E-mail", "Email address"],
    "phone": ["Phone", "Tel.", "Mobile", "Contact number"],
    "occupation": ["Occupation", "Job", "Profession", "Job title"],
    "hobbies": ["Hobbies", "Interests", "Free-time activities"],
    "birthday": ["Date of birth", "DOB", "Birthday", "Born"],
}
ZH_LABELS = {
    "name": ["姓名", "名字", "申请人"],
    "age": ["年龄"],
    "city": ["城市", "所在城市", "现居地", "居住地"],
    "email": ["邮箱", "电子邮箱", "E-mail"],
    "phone": ["电话", "手机", "联系电话", "手机号码"],
    "occupation": ["职业", "工作", "职务"],
    "hobbies": ["爱好", "兴趣爱好", "特长"],
    "birthday": ["出生日期", "生日", "出生年月日"],
}
# Sentences that state one fact: {S} is the subject (a pronoun or the name), {v} the value.
EN_THIRD = {
    "age": ["{S} is {v}", "{S} is {v} years old", "{S} turned {v} this year", "{S} is aged {v}"],
    "city": ["{S} lives in {v}", "{S} is based in {v}", "{S} moved to {v} a few years ago"],
    "email": ["{S} can be reached at {v}", "{S} reads e-mail at {v}"],
    "phone": ["{S} can be called on {v}", "{S} gave {v} as a phone number"],
    "occupation": ["{S} works as {an} {v}", "{S} is {an} {v} by profession"],
    "hobbies": ["{S} enjoys {v}", "{S} is keen on {v}", "{S} spends weekends on {v}"],
    "birthday": ["{S} was born on {v}", "{S} has a birthday on {v}"],
}
EN_FIRST_PERSON = {
    "age": ["I am {v}", "I'm {v} years old", "I turned {v} this year"],
    "city": ["I live in {v}", "I'm based in {v}", "I moved to {v} a few years ago"],
    "email": ["You can reach me at {v}", "My e-mail is {v}"],
    "phone": ["My phone number is {v}", "Call me on {v}"],
    "occupation": ["I work as {an} {v}", "I'm {an} {v}"],
    "hobbies": ["I enjoy {v}", "I'm into {v}", "I spend my weekends on {v}"],
    "birthday": ["I was born on {v}", "My birthday is {v}"],
}
ZH_CLAUSES = {
    "age": ["{S}今年{v}", "{S}{v}了", "{S}已经{v}了"],
    "city": ["{S}住在{v}", "{S}在{v}生活", "{S}现在在{v}"],
    "email": ["{S}的邮箱是{v}", "{S}的电子邮箱：{v}"],
    "phone": ["{S}的电话是{v}", "{S}的手机号是{v}"],
    "occupation": ["{S}是一名{v}", "{S}的职业是{v}", "{S}在做{v}"],
    "hobbies": ["{S}喜欢{v}", "{S}的爱好是{v}"],
    "birthday": ["{S}出生于{v}", "{S}的生日是{v}"],
}


class _Subject:
    """The person a document is about, the other people in it, and how its facts are said."""

    def __init__(self, rng: random.Random, zh: bool):
        self.zh = zh
        age = rng.randint(18, 90)
        self.facts = {
            "name": _untitled_name(rng, zh),
            "age": age,
            **person_facts(rng, zh, max_hobbies=3),
            "birthday": f"{2025 - age}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        }
        self.name = self.facts["name"]
        self.keys = rng.sample(KEY_ORDER[1:], rng.randint(2, 6))  # the facts stated besides the name
        self.others: list[str] = []
        while len(self.others) < 3:
            other = _untitled_name(rng, zh)
            if other != self.name and other not in self.others:
                self.others.append(other)
        self.title = rng.choice(ZH_TITLES if zh else EN_TITLES) if rng.random() < TITLED else ""
        self.pronoun = rng.choice("他她") if zh else rng.choice(["He", "She"])  # one per document
        if self.title in GENDERED:  # "Mr." is a he, "女士" a she
            self.pronoun = GENDERED[self.title]
        self.shown: set[str] = set()  # every value as the text spells it (kept whole by _typos)

    def called(self, rng: random.Random) -> str:
        """The subject's name as a text says it: with the title (when they have one) or without."""
        if not self.title or rng.random() < 0.3:
            return self.name
        return self.name + self.title if self.zh else f"{self.title} {self.name}"

    def value(self, rng: random.Random, key: str, field: bool = False) -> str:
        """One fact as a text writes it: ages in digits or words, dates spelled, hobbies joined."""
        shown = self._spell(rng, key, field)
        self.shown.add(shown)
        return shown

    def _spell(self, rng: random.Random, key: str, field: bool) -> str:
        v = self.facts[key]
        if key == "age":
            if self.zh:
                forms = [f"{v}岁", f"{zh_number(v)}岁"] + ([str(v), zh_number(v)] if field else [])
            else:
                forms = [str(v), en_number(v)] + ([f"{v} years", f"{v} yrs"] if field else [])
            return rng.choice(forms)
        if key == "hobbies":
            return ("、".join(v) if self.zh else ", ".join(v)) if field else _join(v, self.zh)
        if key == "birthday":
            return _spell_date(*map(int, v.split("-")), self.zh, rng)
        return v

    def fields(self, rng: random.Random, with_name: bool = True, sep: str = "") -> list[str]:
        """ "Label: value" lines of the stated facts (and the name), in a shuffled order."""
        keys = (["name"] if with_name else []) + self.keys
        rng.shuffle(keys)
        labels, colon = (ZH_LABELS, "：") if self.zh else (EN_LABELS, ": ")
        return [rng.choice(labels[k]) + (sep or colon) + self.value(rng, k, field=True) for k in keys]

    def sentences(self, rng: random.Random, first_person: bool = False, by_name: bool = False) -> list[str]:
        """One sentence per stated fact (no final stop), in a shuffled order: in the first
        person, or with a pronoun (the first one with the name when ``by_name``)."""
        keys = self.keys[:]
        rng.shuffle(keys)
        out = []
        for i, key in enumerate(keys):
            if self.zh:
                subject = "我" if first_person else self.pronoun
                template = rng.choice(ZH_CLAUSES[key])
            else:
                subject = self.pronoun
                template = rng.choice((EN_FIRST_PERSON if first_person else EN_THIRD)[key])
            if by_name and i == 0:
                subject = self.called(rng)
            an = "an" if str(self.facts["occupation"])[0] in "aeiou" else "a"
            out.append(template.format(S=subject, v=self.value(rng, key), an=an))
        return out

    def prose(self, rng: random.Random, first_person: bool = False, by_name: bool = False) -> str:
        """The sentences written together: "。"-ended in Chinese, "."-ended in English."""
        parts = self.sentences(rng, first_person, by_name)
        if self.zh:
            return "，".join(parts) + "。"
        return " ".join(p + "." for p in parts)


def _untitled_name(rng: random.Random, zh: bool) -> str:
    """A training name that holds no title word (so a title next to it is never part of it)."""
    while True:
        name = person_name(rng, zh, False)
        if not any(t in name for t in (ZH_TITLES if zh else EN_TITLES)):
            return name


def _time(rng: random.Random) -> str:
    return f"{rng.randint(7, 22):02d}:{rng.randint(0, 59):02d}"


def _times(rng: random.Random, n: int) -> list[str]:
    """``n`` times of one day in order, as a chat log stamps its messages."""
    return [f"{m // 60:02d}:{m % 60:02d}" for m in sorted(rng.sample(range(7 * 60, 23 * 60), n))]


# ----- English kinds -----


def _email_about(rng: random.Random, s: _Subject) -> str:
    sender, recipient = s.others[0], s.others[1]
    head = f"From: {sender}\nTo: {recipient}\nSubject: " + rng.choice(
        ["Introducing a new colleague", "Contact details", f"About {s.name}", "New volunteer"]
    )
    intro = rng.choice(
        [
            "I'd like you to meet {t}.",
            "Quick note about {t}, who starts with us next week.",
            "As promised, here are the details of {t}.",
        ]
    ).format(t=s.called(rng))
    greeting = rng.choice([f"Hi {recipient},", f"Dear {recipient},", "Hello team,"])
    sign = rng.choice(["Best,", "Thanks,", "Cheers,", "Kind regards,"])
    return f"{head}\n\n{greeting}\n\n{intro} {s.prose(rng)}\n\n{sign}\n{sender}"


def _email_self(rng: random.Random, s: _Subject) -> str:
    recipient = rng.choice(EN_TITLES[:5]) + " " + s.others[0]
    start = rng.choice(
        [f"My name is {s.name} and I am writing to apply for the course.", "I am writing to apply for the course."]
    )
    sign = rng.choice(["Yours sincerely,", "Best wishes,", "Regards,"])
    return f"Subject: Application\n\nDear {recipient},\n\n{start} {s.prose(rng, first_person=True)}\n\n{sign}\n{s.name}"


def _chat(rng: random.Random, s: _Subject) -> str:
    speakers = s.others[: rng.randint(2, 3)]
    if rng.random() < 0.3:  # the subject is in the chat too (a 3rd or 4th speaker) and speaks for themself
        lines = [(speakers[0], rng.choice(["welcome to the group! tell us about yourself", "hi, who's new here?"]))]
        lines += [(s.name, sentence) for sentence in s.sentences(rng, first_person=True)]
    else:
        lines = [(speakers[0], rng.choice(["did you meet {t} yet?", "who is {t}?", "tell me about {t}"]))]
        lines[0] = (lines[0][0], lines[0][1].format(t=s.called(rng)))
        lines += [(rng.choice(speakers[1:]), x[0].lower() + x[1:]) for x in s.sentences(rng)]
    lines.append((speakers[0], rng.choice(["ok thanks!", "great 👍", "noted"])))
    stamp = rng.choice(["[{t}] {who}: {m}", "{who} ({t}): {m}", "{t} {who}: {m}"])
    return "\n".join(stamp.format(t=t, who=who, m=m) for t, (who, m) in zip(_times(rng, len(lines)), lines))


def _interview(rng: random.Random, s: _Subject) -> str:
    host = s.others[0]
    lines = [f"{host}: Welcome! Could you introduce yourself?", f"{s.name}: Sure. I'm {s.name}."]
    for sentence in s.sentences(rng, first_person=True):
        lines.append(f"{host}: " + rng.choice(["And?", "Tell us more.", "Interesting. What else?"]))
        lines.append(f"{s.name}: {sentence}.")
    return rng.choice(["Transcript of the interview", "Podcast notes"]) + "\n" + "\n".join(lines)


def _form(rng: random.Random, s: _Subject) -> str:
    head = rng.choice(["REGISTRATION FORM", "Member details", "Visitor sign-in", "Enrolment form"])
    tail = rng.choice(
        [
            f"Emergency contact: {s.others[0]}",
            f"Checked by: {s.others[0]}",
            f"Referred by: {rng.choice(EN_TITLES)} {s.others[0]}",
        ]
    )
    return "\n".join([head, *s.fields(rng, sep=rng.choice([": ", " - ", ":\t"])), tail])


def _csv(rng: random.Random, s: _Subject) -> str:
    keys = ["name", *s.keys]
    rng.shuffle(keys)
    sep = rng.choice([",", "\t", ";"])
    values = [s.value(rng, k, field=True) for k in keys]
    values = [f'"{v}"' if sep in v else v for v in values]  # a value holding the separator is quoted
    header = sep.join(rng.choice(EN_LABELS[k]).lower().replace(" ", "_") for k in keys)
    return header + "\n" + sep.join(values)


def _news(rng: random.Random, s: _Subject) -> str:
    place = s.facts["city"].upper() if "city" in s.keys else "LOCAL NEWS"
    lead = rng.choice(
        [
            "{t} won this year's community award.",
            "{t} opened a small bakery on Main Street on Saturday.",
            "The library has a new volunteer: {t}.",
        ]
    ).format(t=s.called(rng))
    quote = f'"We are very proud," said {s.others[0]}.'
    return f"{place} - {lead} {s.prose(rng)} {quote}"


def _diary(rng: random.Random, s: _Subject) -> str:
    day = _spell_date(2024, rng.randint(1, 12), rng.randint(1, 28), False, rng)
    met = rng.choice(
        [
            "Met {t} at {o}'s party tonight.",
            "{o} finally introduced me to {t}.",
            "Had coffee with {o}, and {t} joined us.",
        ]
    ).format(t=s.called(rng), o=s.others[0])
    return (
        f"{day}\nDear diary,\n{met} {s.prose(rng)} {rng.choice(['What a day.', 'Must call again soon.', ''])}".rstrip()
    )


def _social_post(rng: random.Random, s: _Subject) -> str:
    handle = "@" + re.sub(r"[^a-z]", "", s.others[0].lower())[:10]
    body = rng.choice(["Say hi to my friend {t}! 🎉", "Shout-out to {t} 🙌", "Happy birthday, {t}!"]).format(
        t=s.called(rng)
    )
    return (
        f"{handle} · {rng.randint(1, 23)}h\n{body} {s.prose(rng)} #friends #{rng.choice(['weekend', 'life', 'team'])}"
    )


def _cv(rng: random.Random, s: _Subject) -> str:
    top = [s.name, rng.choice(["CURRICULUM VITAE", "Résumé", "CV"])]
    rng.shuffle(top)
    return "\n".join([*top, *s.fields(rng, with_name=False), f"References: {s.others[0]}, on request"])


def _minutes(rng: random.Random, s: _Subject) -> str:
    attendees = [s.called(rng), *s.others[:2]]
    rng.shuffle(attendees)
    chair = s.others[0]
    return (
        f"Minutes of the team meeting\nChair: {chair}\nAttendees: {', '.join(attendees)}\n"
        f"1. Welcome of a new member. {s.prose(rng, by_name=True)}\n2. Next meeting in two weeks."
    )


def _appointment(rng: random.Random, s: _Subject) -> str:
    when = _spell_date(2025, rng.randint(1, 12), rng.randint(1, 28), False, rng)
    return (
        f"Dear {s.called(rng)},\n\nYour appointment with Dr. {s.others[0]} on {when} at {_time(rng)} is confirmed.\n"
        "Patient details:\n" + "\n".join(s.fields(rng, with_name=False)) + f"\n\nReception, {s.others[1]}"
    )


def _guest_list(rng: random.Random, s: _Subject) -> str:
    rows = [f"{s.called(rng)} ({'; '.join(s.fields(rng, with_name=False, sep=' '))})", s.others[0], f"{s.others[1]} +1"]
    rng.shuffle(rows)
    return "Guest list\n" + "\n".join(f"{i}. {row}" for i, row in enumerate(rows, 1))


def _club_signup(rng: random.Random, s: _Subject) -> str:
    club = rng.choice(["chess club", "choir", "running club", "evening class", "reading group"])
    return (
        f"Welcome to the {club}! We have registered a new member: {s.called(rng)}. {s.prose(rng)} "
        f"Questions? Ask our secretary, {s.others[0]}."
    )


def _reference_letter(rng: random.Random, s: _Subject) -> str:
    return (
        f"To whom it may concern,\n\nI am pleased to recommend {s.called(rng)}, whom I have known for "
        f"{en_number(rng.randint(2, 12))} years. {s.prose(rng)}\n\nSincerely,\n{rng.choice(EN_TITLES[:2])} {s.others[0]}"
    )


def _text_with_typos(rng: random.Random, s: _Subject) -> str:
    text = rng.choice(["hey {o}, so about {t}: ", "{o} - quick msg re {t}. "]).format(o=s.others[0], t=s.called(rng))
    return _typos(rng, text + s.prose(rng), s)


def _typos(rng: random.Random, text: str, s: _Subject) -> str:
    """``text`` with two letters swapped in some longer words, never inside a name or a
    value as the text spells it (the facts stay copyable)."""
    values = {s.name, *s.others, *s.shown, *s.facts["hobbies"], s.title} - {""}
    spans = "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))
    pieces = re.split(f"({spans})", text)
    out = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:  # outside every value
            piece = re.sub(
                r"\b[a-z]{5,}\b", lambda m: _swap(rng, m.group()) if rng.random() < 0.25 else m.group(), piece
            )
        out.append(piece)
    return "".join(out)


def _swap(rng: random.Random, word: str) -> str:
    i = rng.randint(1, len(word) - 3)
    return word[:i] + word[i + 1] + word[i] + word[i + 2 :]


# ----- Chinese kinds -----


def _wechat(rng: random.Random, s: _Subject) -> str:
    speakers = s.others[: rng.randint(2, 3)]
    if rng.random() < 0.3:  # the subject is in the group too and speaks for themself
        lines = [(speakers[0], rng.choice(["欢迎新朋友！介绍一下自己吧", "新来的是哪位？"]))]
        lines += [(s.name, sentence) for sentence in s.sentences(rng, first_person=True)]
    else:
        lines = [(speakers[0], rng.choice(["你们认识{t}吗？", "{t}是谁呀？", "说说{t}吧"]).format(t=s.called(rng)))]
        lines += [(rng.choice(speakers[1:]), sentence) for sentence in s.sentences(rng)]
    lines.append((speakers[0], rng.choice(["好的，谢谢！", "收到", "明白了👍"])))
    return "微信聊天记录\n" + "\n".join(f"{who} {t}\n{m}" for t, (who, m) in zip(_times(rng, len(lines)), lines))


def _notice(rng: random.Random, s: _Subject) -> str:
    what = rng.choice(["新同事入职", "优秀志愿者表彰", "社团新成员"])
    return (
        f"通知\n关于{what}的通知\n各位同事：\n现将{s.called(rng)}的情况通知如下：{s.prose(rng)}\n"
        f"特此通知。\n{s.others[0]}（办公室）"
    )


def _register_form(rng: random.Random, s: _Subject) -> str:
    head = rng.choice(["登记表", "报名表", "入会申请表", "住户信息登记"])
    return "\n".join([head, *s.fields(rng, sep=rng.choice(["：", ":", "　"])), f"经办人：{s.others[0]}"])


def _news_brief(rng: random.Random, s: _Subject) -> str:
    lead = rng.choice(["本报讯", "新闻简讯", "简讯"])
    what = rng.choice(["在社区志愿服务中获得表彰", "在全市马拉松比赛中夺冠", "开了一家小书店"])
    return f"{lead} 近日，{s.called(rng)}{what}。{s.prose(rng)}同事{s.others[0]}表示：“我们都为{s.pronoun}高兴。”"


def _zh_diary(rng: random.Random, s: _Subject) -> str:
    day = _spell_date(2024, rng.randint(1, 12), rng.randint(1, 28), True, rng)
    met = rng.choice(["今天在{o}家认识了{t}。", "{o}介绍我认识了{t}。", "下午和{o}喝茶，{t}也来了。"])
    return f"{day} {rng.choice('晴阴雨')}\n" + met.format(o=s.others[0], t=s.called(rng)) + s.prose(rng)


def _resume(rng: random.Random, s: _Subject) -> str:
    return "\n".join(["个人简历", *s.fields(rng), f"推荐人：{s.others[0]}{rng.choice(ZH_TITLES[:2])}"])


def _leave_note(rng: random.Random, s: _Subject) -> str:
    boss = s.others[0] + rng.choice(["经理", "主任", "老师"])
    when = _spell_date(2025, rng.randint(1, 12), rng.randint(1, 28), True, rng)
    return (
        f"请假条\n尊敬的{boss}：\n我是{s.name}，因家中有事，需请假两天，望批准。{s.prose(rng, first_person=True)}\n"
        f"请假人：{s.name}\n{when}"
    )


def _zh_minutes(rng: random.Random, s: _Subject) -> str:
    attendees = [s.called(rng), *s.others[:2]]
    rng.shuffle(attendees)
    return (
        f"会议纪要\n主持人：{s.others[0]}\n参会人员：{'、'.join(attendees)}\n"
        f"一、新成员介绍。{s.prose(rng, by_name=True)}\n二、下次会议时间另行通知。"
    )


def _clinic(rng: random.Random, s: _Subject) -> str:
    dept = rng.choice(["内科", "外科", "眼科", "口腔科"])
    return "\n".join(["挂号单", *s.fields(rng), f"科室：{dept}", f"医生：{s.others[0]}医生"])


def _sms(rng: random.Random, s: _Subject) -> str:
    sign = rng.choice(["【社区服务中心】", "【健身房】", "【图书馆】"])
    return f"{sign}尊敬的{s.called(rng)}，您的会员信息已登记：{'，'.join(s.fields(rng, with_name=False))}。如有疑问请联系{s.others[0]}。"


def _zh_email(rng: random.Random, s: _Subject) -> str:
    to = s.others[0] + rng.choice(["经理", "老师", "女士", "先生"])
    return f"主题：推荐{s.name}\n{to}您好：\n向您推荐{s.called(rng)}。{s.prose(rng)}\n此致\n敬礼\n{s.others[1]}"


def _moments(rng: random.Random, s: _Subject) -> str:
    body = rng.choice(["欢迎{t}加入我们！🎉", "今天和{t}一起吃饭😀", "祝{t}生日快乐！"]).format(t=s.called(rng))
    return f"{s.others[0]}的朋友圈\n{body}{s.prose(rng)}\n{rng.randint(2, 59)}分钟前 · {s.others[1]}点赞"


EN_KINDS = {
    "email_about": _email_about,
    "email_self": _email_self,
    "chat": _chat,
    "interview": _interview,
    "form": _form,
    "csv_row": _csv,
    "news": _news,
    "diary": _diary,
    "social_post": _social_post,
    "cv": _cv,
    "minutes": _minutes,
    "appointment": _appointment,
    "guest_list": _guest_list,
    "club_signup": _club_signup,
    "reference_letter": _reference_letter,
    "text_with_typos": _text_with_typos,
}
ZH_KINDS = {
    "wechat": _wechat,
    "notice": _notice,
    "register_form": _register_form,
    "news_brief": _news_brief,
    "zh_diary": _zh_diary,
    "resume": _resume,
    "leave_note": _leave_note,
    "zh_minutes": _zh_minutes,
    "clinic": _clinic,
    "sms": _sms,
    "zh_email": _zh_email,
    "moments": _moments,
}
DOCUMENT_KINDS = list(EN_KINDS) + list(ZH_KINDS)


def document_with_kind(rng: random.Random) -> tuple[str, dict]:
    """A document example and the name of its kind (for the tests)."""
    zh = rng.random() < 0.5
    kinds = ZH_KINDS if zh else EN_KINDS
    kind = rng.choice(list(kinds))
    subject = _Subject(rng, zh)
    text = kinds[kind](rng, subject)
    return kind, extraction_request(rng, subject.facts, ["name", *subject.keys], text, zh, False)


def document_example(rng: random.Random) -> dict:
    """One training extraction example whose text is a kind of document (DOCUMENT_KINDS)."""
    return document_with_kind(rng)[1]
