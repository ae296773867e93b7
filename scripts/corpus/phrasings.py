"""The fixed phrasings of the extraction examples: how a text says each fact, how it opens on
the person, the system turns and the instructions, each as (training, held-out) pools; and the
course's running example, which the corpus leaves out."""

from __future__ import annotations

import random

# The course's running example (chapter 06). It is NOT in the corpus (nor are the demo's
# other texts, see pools.DEMO_NAMES): the demo shows the model copying from a text it has never seen.
SEED_EXAMPLE_TEXT = "张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。"
SEED_EXAMPLE_ANSWER = {"name": "张三", "age": 28, "hobbies": ["编程", "摄影", "爬山"]}
SEED_SYSTEM = "你是一个信息抽取助手，只输出合法 JSON，不要输出任何解释。"
SEED_INSTRUCTION = "请从下面的文本中抽取人物信息，严格按照给定的 JSON Schema 输出："

# Each fact has training phrasings and, after them, held-out phrasings that only the
# evaluation uses. {} is the value; "{an}" is "a" or "an" before an English occupation.
EN_FACTS = {
    "age": (
        [
            "is {} years old",
            "is {}",
            "just turned {}",
            "is aged {}",
            "is now {}",
            "turned {} this year",
            "is {} this year",
            "has reached the age of {}",
            "will be {} next month",
            "is a {}-year-old",
            "is currently {}",
            "has just hit {}",
            "is {} now",
            "celebrated turning {}",
            "is age {}",
        ],
        ["recently turned {}", "is {} years of age"],
    ),
    "city": (
        [
            "lives in {}",
            "is based in {}",
            "comes from {}",
            "grew up in {}",
            "moved to {}",
            "has a flat in {}",
            "was raised in {}",
            "settled in {}",
            "is living in {}",
            "stays in {}",
            "has a house in {}",
            "now lives in {}",
            "is settled in {}",
        ],
        ["resides in {}", "calls {} home"],
    ),
    "email": (
        [
            "can be reached at {}",
            "uses the email {}",
            "has the email address {}",
            "writes from {}",
            "has the address {}",
            "answers emails at {}",
            "can be emailed at {}",
            "gets email at {}",
            "checks the inbox {}",
            "lists the email {}",
        ],
        ["reads mail sent to {}"],
    ),
    "phone": (
        [
            "has the phone number {}",
            "can be called at {}",
            "answers the phone at {}",
            "has the number {}",
            "is reachable on {}",
            "gave us the number {}",
            "can be phoned at {}",
            "has the mobile {}",
            "is on the phone at {}",
            "answers at {}",
        ],
        ["picks up at {}"],
    ),
    "occupation": (
        [
            "works as {an} {}",
            "is {an} {}",
            "has a job as {an} {}",
            "is employed as {an} {}",
            "makes money as {an} {}",
            "trained as {an} {}",
            "has worked as {an} {}",
            "serves as {an} {}",
            "is currently {an} {}",
            "holds a job as {an} {}",
        ],
        ["earns a living as {an} {}"],
    ),
    "hobbies": (
        [
            "enjoys {}",
            "likes {}",
            "loves {}",
            "spends free time on {}",
            "adores {}",
            "is keen on {}",
            "is passionate about {}",
            "has a passion for {}",
            "is a fan of {}",
            "really likes {}",
            "is interested in {}",
            "spends weekends on {}",
            "is crazy about {}",
            "is big on {}",
            "dabbles in {}",
            "has taken up {}",
            "practises {}",
            "is hooked on {}",
            "can't get enough of {}",
            "relaxes with {}",
            "is mad about {}",
            "has a soft spot for {}",
            "unwinds with {}",
            "is devoted to {}",
            "takes pleasure in {}",
        ],
        ["is into {}", "is fond of {}"],
    ),
    "birthday": (
        [
            "was born on {}",
            "has a birthday on {}",
            "celebrates a birthday on {}",
            "has the birth date {}",
            "was born {}",
            "has a birth date of {}",
            "arrived on {}",
        ],
        ["came into the world on {}"],
    ),
}
ZH_FACTS = {
    "age": (["今年{}岁", "{}岁", "年龄是{}岁", "已经{}岁了", "今年刚满{}岁", "{}岁了", "年满{}岁"], ["现年{}岁"]),
    "city": (["住在{}", "在{}工作", "来自{}", "家在{}", "定居{}", "在{}长大", "老家是{}"], ["生活在{}"]),
    "email": (["邮箱是{}", "电子邮件地址为{}", "邮箱地址是{}", "常用邮箱{}", "电邮是{}"], ["邮件可以发到{}"]),
    "phone": (["电话是{}", "手机号码{}", "联系电话是{}", "电话号码是{}", "可以打{}联系"], ["手机是{}"]),
    "occupation": (["是一名{}", "职业是{}", "是{}", "做{}工作", "是个{}", "当{}"], ["从事{}工作"]),
    "hobbies": (
        [
            "平时喜欢{}",
            "爱好是{}",
            "业余时间喜欢{}",
            "喜欢{}",
            "热爱{}",
            "周末喜欢{}",
            "最大的爱好是{}",
            "特别喜欢{}",
            "空闲时喜欢{}",
            "对{}很感兴趣",
        ],
        ["闲暇时爱{}"],
    ),
    "birthday": (["生日是{}", "出生于{}", "生于{}", "在{}出生"], ["出生日期是{}"]),
}
# How a paragraph introduces the person: (training openers, held-out openers); {n} is the name.
# Many openers, so that the model learns what a name looks like rather than where it stands.
EN_OPENERS = (
    [
        "{n}",
        "Meet {n}, who",
        "My colleague {n}",
        "Our new neighbour {n}",
        "This is {n}, who",
        "Let me introduce {n}, who",
        "Yesterday I met {n}, who",
        "Our teacher {n}",
        "A friend named {n}",
        "The new hire, {n},",
        "I work with {n}, who",
        "Here is a note about {n}, who",
        "My cousin {n}",
        "Everyone at the office knows {n}, who",
        "According to the file, {n}",
        "Please welcome {n}, who",
        "Let me tell you about {n}, who",
        "We spoke to {n}, who",
        "There is {n}, who",
        "Think of {n}, who",
        "I know {n}, who",
        "Our client {n}",
        "The applicant {n}",
        "You should meet {n}, who",
        "Take {n}, who",
        # more, so that an opener never seen (eval_generalisation's) is not read as part of the name
        "Last week we hired {n}, who",
        "Consider {n}, who",
        "On the team is {n}, who",
        "The visitor, {n},",
        "Our records mention {n}, who",
        "A short profile of {n}, who",
        "Guess who called: {n}, who",
        "The winner, {n},",
        "You may remember {n}, who",
        "Today's guest is {n}, who",
        "My old friend {n}",
        "The form was filled in by {n}, who",
        "We would like to thank {n}, who",
        "Among the members is {n}, who",
        "Please note that {n}",
        "The speaker, {n},",
        "I ran into {n}, who",
        "Our landlord {n}",
        "The report is about {n}, who",
        "Everyone likes {n}, who",
    ],
    ["Say hello to {n}, who"],
)
# Openers of everyday words ending in a verb of writing or naming (写着, 记着, 印着, 是, 为),
# most of them before nouns the vocabulary spells in bytes (名单, 简历, 卷宗): issue 33's
# stages read an opener of unseen words as part of the name ("档案里写着端木石" -> "档案", or
# "孙莺" for 公孙莺 after it). They share everyday words with the held-out openers, as the
# English openers do ("who", "is"); none is, or contains, a held-out opener or its noun 档案.
ZH_NATURAL_OPENERS = [
    "名单上写着{n}，",
    "信封上写着{n}，",
    "合同里写着{n}，",
    "简历上写着{n}，",
    "门牌上写着{n}，",
    "快递单上写着{n}，",
    "照片背面写着{n}，",
    "黑板上写着{n}，",
    "工牌上印着{n}，",
    "名片上印着{n}，",
    "病历上记着{n}，",
    "会议纪要里记着{n}，",
    "笔记本里记着{n}，",
    "卷宗里记的是{n}，",
    "登记表上填着{n}，",
    "证件上的名字是{n}，",
    "户口本上登记的是{n}，",
    "证书上写的是{n}，",
    "签名栏里签着{n}，",
    "花名册里有{n}，",
    "值班表上排着{n}，",
    "通知里提到{n}，",
    "报道里采访了{n}，",
    "推荐信推荐的是{n}，",
    "获奖者是{n}，",
    "负责人是{n}，",
    "联系人为{n}，",
    "房东叫{n}，",
    "作者署名为{n}，",
    "收件人：{n}，",
    "寄件人是{n}，",
    "发言人是{n}，",
    "主讲人是{n}，",
    "队长是{n}，",
    "班主任是{n}，",
    "新郎是{n}，",
    "病人名叫{n}，",
    "屏幕上显示着{n}，",
    "抽屉里的文件写着{n}，",
    "表彰名单里列着{n}，",
]
ZH_OPENERS = (
    [
        "{n}",
        "我的朋友{n}",
        "{n}，",
        "同事{n}",
        "认识一下{n}，",
        "介绍一下，{n}",
        "邻居{n}",
        "我的同学{n}",
        "新来的{n}",
        "表哥{n}",
        "据资料，{n}",
        "大家好，我叫{n}，",
        "说说{n}，",
        "这是{n}，",
        "关于{n}：",
        "资料显示{n}，",
        "客户{n}",
        "申请人{n}，",
        "今天见到了{n}，",
        "隔壁的{n}",
        "我们公司的{n}",
        "有一个人叫{n}，",
        "表格上填的是{n}，",
        "报名的是{n}，",
        "老同学{n}",
        "我要说的人是{n}，",
        "记录显示，{n}",
    ]
    + ZH_NATURAL_OPENERS,
    ["这位是{n}，"],
)
# Openers that only scripts/eval_generalisation.py uses (issue 33), never trained on: several,
# so that its numbers do not measure one phrase. heldout_extraction_prompts keeps the one
# held-out opener above, so eval_extraction's sets stay byte-identical.
EN_GENERALISATION_OPENERS = [
    "Say hello to {n}, who",
    "Allow me to present {n}, who",
    "Records list {n}, who",
    "A few words on {n}, who",
    "Next on the list is {n}, who",
    "We interviewed {n}, who",
]
ZH_GENERALISATION_OPENERS = ["这位是{n}，", "登记人是{n}，", "要介绍的是{n}，", "档案里写着{n}，"]

EN_SYSTEMS = [
    "You are an information extraction assistant. Output valid JSON only.",
    "You are a helpful assistant.",
    "You are a concise assistant.",
]
ZH_SYSTEMS = [SEED_SYSTEM, "你是一个乐于助人的助手。"]
STRICT_SYSTEMS = {EN_SYSTEMS[0], SEED_SYSTEM}
# Instructions: (training, held-out). {fields} lists the keys asked for; an instruction
# without {fields} asks for every fact the text mentions.
# Strict requests ask for JSON and nothing else; their answers are always bare JSON.
EN_STRICT = (
    [
        "Extract {fields} from the following text. Reply with JSON only.",
        "Return only a JSON object with the keys {fields} for this text:",
        "Give me {fields} of the person below as a JSON object and nothing else.",
        "Reply with a JSON object holding {fields} and no other text.",
        "From the paragraph below, extract {fields}. JSON only, please.",
        "Return {fields} as JSON, with no extra text.",
        "Respond with nothing but a JSON object of {fields}:",
        "Only JSON, please: {fields} of the person in this text.",
        "Extract {fields} and answer with a bare JSON object.",
    ],
    ["Output just a JSON object with {fields} for the person described here:"],
)
ZH_STRICT = (
    [
        SEED_INSTRUCTION,
        "从以下文本中提取{fields}，只输出 JSON。",
        "请抽取{fields}，只返回 JSON 对象：",
        "读下面这段话，返回包含{fields}的 JSON，不要解释。",
        "以纯 JSON 给出{fields}，不要其他文字：",
        "提取{fields}，回答只能是 JSON 对象。",
        "请只返回 JSON，字段为{fields}：",
    ],
    ["只用 JSON 回答，给出下文人物的{fields}："],
)
# Loose requests just say "as JSON"; like many chat models, half of their answers come
# wrapped in a markdown fence, which is plausible JSON but not valid JSON.
EN_LOOSE = (
    [
        "Extract the person's information from the text below as JSON.",
        "Read the text and output the person's details as a JSON object.",
        "Extract {fields} from the text as JSON.",
        "Can you turn this text into JSON with {fields}?",
        "Turn the text below into JSON with {fields}.",
        "Could you write {fields} of this person as JSON?",
    ],
    ["Put {fields} of this person into JSON."],
)
ZH_LOOSE = (
    [
        "请从下面的文本中抽取人物信息，以 JSON 格式输出。",
        "把下面这段话里的人物信息整理成 JSON：",
        "提取{fields}，用 JSON 表示：",
        "帮我把{fields}整理成 JSON。",
        "请用 JSON 整理{fields}：",
    ],
    ["把这个人的{fields}写成 JSON："],
)


def _pick(rng: random.Random, pools: tuple[list, list], held_out: bool):
    """A choice from the training half or from the held-out half of a (train, held-out) pair."""
    return rng.choice(pools[1] if held_out else pools[0])
