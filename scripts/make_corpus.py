"""Make the seeded synthetic chat corpus that the bundled tiny model is trained on.

Every example is a small dict ``{"task", "system", "user", "assistant"}`` (an instruction
plus some text in the user turn, the answer in the assistant turn), and tool-use examples
add ``"tools"`` (OpenAI tool dicts listed in the system turn), ``"history"`` (earlier
messages after the user turn: a tool call and its ``tool`` result) and ``"tool_calls"``
(the calls of the final answer). Most examples are information extraction into JSON
(English and Chinese, keys always in the fixed order of ``KEY_ORDER``); then tool calls,
and small tasks (dates, emails, IPv4 addresses, phone numbers, hex colours, prose, Q&A).

The corpus forces copying: people's names are generated from syllables and from a few
hundred Chinese characters, cities partly too, ages and numbers are random, and a text
mentions more facts than the request asks for. A tenth of all names (by hash) and a few
phrasings of every fact and instruction never occur in training: the held-out
evaluation (``heldout_extraction_prompts``, ``heldout_tool_prompts``) uses only those.

Usage:
    python scripts/make_corpus.py --examples 40000 --seed 0 --out .cache/tiny-json-llama/corpus.jsonl
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import name_generators  # noqa: E402

# Syllables of generated words and names: onset + vowel + coda, e.g. "Velorin", "Kasumar".
from name_generators import CODAS, ONSETS, VOWELS  # noqa: E402

# The one key order every extraction answer uses; a prompt mentions a subset of these keys.
KEY_ORDER = ["name", "age", "city", "email", "phone", "occupation", "hobbies", "birthday"]

# The course's running example (chapter 06). It is NOT in the corpus (nor are the demo's
# other texts, see DEMO_NAMES): the demo shows the model copying from a text it has never seen.
SEED_EXAMPLE_TEXT = "张三是一名软件工程师，今年28岁，平时喜欢编程、摄影和爬山。"
SEED_EXAMPLE_ANSWER = {"name": "张三", "age": 28, "hobbies": ["编程", "摄影", "爬山"]}
SEED_SYSTEM = "你是一个信息抽取助手，只输出合法 JSON，不要输出任何解释。"
SEED_INSTRUCTION = "请从下面的文本中抽取人物信息，严格按照给定的 JSON Schema 输出："
# The names of minisglang/demo.py's three texts: never generated, for training or for the
# held-out evaluation, so the demo stays a test of copying (its texts are never in the corpus).
DEMO_NAMES = frozenset({"张三", "李小龙", "Maria Lopez"})

# Rare characters (each needs several byte-level tokens) that appear in a few names only.
RARE_HAN = ["䶮", "龘", "𠮷", "燚", "靐", "犇", "淼", "堃"]
EMOJI = ["😀", "🎉", "🌧️", "☀️", "🍜", "🚀", "🐱", "📚", "⚽", "🎸"]

# ---------------------------------------------------------------- pools of facts
ZH_SURNAMES = list(
    "张王李赵刘陈杨黄周吴徐孙马朱胡郭何林高罗郑梁谢宋唐许韩冯邓曹彭曾田董潘袁蔡蒋余于杜叶程魏苏吕丁沈任姚卢"
    "钟汪陆金石贾夏付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
) + ["欧阳", "司马", "诸葛", "上官"]
# A few hundred characters for given names: a 1-2 character given name has ~10^5 spellings.
ZH_GIVEN = list(
    "伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚英华玉兰萍红鹏飞宇浩然欣怡轩梓涵博文思雨晨诺佳琪子一晓春雪松"
    "小龙凤云海波峰辉建国家志新立庆丹宁清亮桂东林晶燕美慧颖婷倩琳璐瑶雯蕾薇茜悦乐欢嘉泽睿哲宏鑫源彬斌"
    "凯旭阳帆航锋俊豪毅威亮坤振荣盛昌达永福贵顺安康健德仁义礼智信忠孝诚善真明月星辰光影晴虹霖露冰"
    "枫桐柏杉竹梅菊荷莲芝兰芬芸苗茂青蓝紫翠金银铭锦绣珊瑚琦瑞祥麟鹤鸿雁鹏燕莺蝶若依如可心语梦婉柔"
    "秋冬夏天地山川河湖江溪泉石磊岩峻崇嵩岳秀丽巧慧敏捷聪颖睿智远航"
)
# Numeral characters that real given names use (张三, 李四, 王五, 赵六, 孙九): a numeral in a
# Chinese text is not always an age, so some generated given names contain one.
ZH_NUMERAL_GIVEN = list("一二三四五六七八九")
NUMERAL_NAME_SHARE = 0.15
# Real city names plus generated ones, so a city cannot be guessed from a list.
ZH_CITIES = [
    "北京",
    "上海",
    "广州",
    "深圳",
    "杭州",
    "成都",
    "武汉",
    "南京",
    "西安",
    "重庆",
    "苏州",
    "天津",
    "长沙",
    "厦门",
    "青岛",
    "大连",
    "昆明",
    "哈尔滨",
    "郑州",
    "济南",
    "合肥",
    "福州",
    "南昌",
    "贵阳",
    "南宁",
    "兰州",
    "太原",
    "石家庄",
    "沈阳",
    "长春",
    "无锡",
    "宁波",
    "温州",
    "珠海",
    "佛山",
    "东莞",
    "洛阳",
    "桂林",
    "拉萨",
    "乌鲁木齐",
]
ZH_CITY_CHARS = list("安宁和平清河阳江山城泉州源丰华兴隆德昌盛新乐东西南北湖口水林")
ZH_JOBS = [
    "软件工程师",
    "教师",
    "医生",
    "护士",
    "律师",
    "设计师",
    "会计",
    "记者",
    "厨师",
    "摄影师",
    "产品经理",
    "数据分析师",
    "销售",
    "司机",
    "建筑师",
    "程序员",
    "研究员",
    "警察",
    "学生",
    "演员",
    "歌手",
    "作家",
    "翻译",
    "导游",
    "画家",
    "飞行员",
    "消防员",
    "农民",
    "工人",
    "店主",
    "银行职员",
    "大学教授",
    "编辑",
    "快递员",
    "理发师",
    "药剂师",
    "兽医",
]
ZH_HOBBIES = [
    "编程",
    "摄影",
    "爬山",
    "跑步",
    "游泳",
    "阅读",
    "画画",
    "唱歌",
    "跳舞",
    "钓鱼",
    "下棋",
    "旅行",
    "烹饪",
    "书法",
    "弹吉他",
    "骑行",
    "看电影",
    "打篮球",
    "踢足球",
    "养花",
    "写作",
    "露营",
    "武术",
    "读书",
    "太极",
    "滑雪",
    "打羽毛球",
    "打乒乓球",
    "弹钢琴",
    "拉小提琴",
    "听音乐",
    "做手工",
    "烘焙",
    "喝茶",
    "品酒",
    "收藏邮票",
    "打游戏",
    "看小说",
    "健身",
    "瑜伽",
    "徒步",
    "潜水",
    "冲浪",
    "滑板",
    "园艺",
    "养猫",
    "遛狗",
    "集邮",
    "剪纸",
    "刺绣",
    "插花",
    "围棋",
    "象棋",
    "桥牌",
    "魔术",
    "相声",
    "京剧",
    "广场舞",
    "练字",
    "看展览",
]

EN_FIRST = [
    "Alice",
    "Bob",
    "Carol",
    "David",
    "Emma",
    "Frank",
    "Grace",
    "Henry",
    "Isabel",
    "Jack",
    "Karen",
    "Liam",
    "Maria",
    "Noah",
    "Olivia",
    "Peter",
    "Quinn",
    "Ryan",
    "Sophia",
    "Thomas",
    "Uma",
    "Victor",
    "Wendy",
    "Xavier",
    "Yara",
    "Zack",
    "Chloe",
    "Daniel",
    "Hannah",
    "Oscar",
    "Amir",
    "Bianca",
    "Diego",
    "Elena",
    "Fatima",
    "Hugo",
    "Ingrid",
    "Jamal",
    "Kenji",
    "Lucia",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Rosa",
    "Sven",
    "Tariq",
    "Vera",
]
EN_LAST = [
    "Smith",
    "Johnson",
    "Brown",
    "Taylor",
    "Miller",
    "Wilson",
    "Moore",
    "Anderson",
    "Thomas",
    "Jackson",
    "White",
    "Harris",
    "Martin",
    "Garcia",
    "Clark",
    "Lewis",
    "Walker",
    "Young",
    "King",
    "Wright",
    "Lopez",
    "Hill",
    "Green",
    "Baker",
    "Nguyen",
    "Kim",
    "Patel",
    "Chen",
    "Murphy",
    "Rossi",
    "Silva",
    "Novak",
    "Kowalski",
    "Ibrahim",
    "Tanaka",
    "Larsen",
    "Dubois",
    "Fischer",
    "Okafor",
    "Haddad",
    "Costa",
    "Petrov",
    "Moreau",
    "Schmidt",
]
EN_CITIES = [
    "London",
    "Paris",
    "New York",
    "Tokyo",
    "Berlin",
    "Toronto",
    "Sydney",
    "Seattle",
    "Boston",
    "Chicago",
    "Madrid",
    "Rome",
    "Dublin",
    "Austin",
    "Denver",
    "Singapore",
    "Oslo",
    "Vienna",
    "Lisbon",
    "Melbourne",
    "Cairo",
    "Lagos",
    "Nairobi",
    "Lima",
    "Quito",
    "Bogota",
    "Prague",
    "Warsaw",
    "Athens",
    "Helsinki",
    "Osaka",
    "Seoul",
    "Manila",
    "Hanoi",
    "Mumbai",
    "Dubai",
    "Zurich",
    "Geneva",
    "Porto",
    "Valencia",
]
EN_JOBS = [
    "software engineer",
    "teacher",
    "doctor",
    "nurse",
    "lawyer",
    "designer",
    "accountant",
    "journalist",
    "chef",
    "photographer",
    "product manager",
    "data analyst",
    "pilot",
    "architect",
    "student",
    "researcher",
    "electrician",
    "librarian",
    "plumber",
    "pharmacist",
    "dentist",
    "translator",
    "firefighter",
    "farmer",
    "baker",
    "carpenter",
    "mechanic",
    "musician",
    "painter",
    "writer",
    "actor",
    "engineer",
    "economist",
    "veterinarian",
    "tour guide",
    "police officer",
    "barista",
    "florist",
    "surgeon",
    "web developer",
]
EN_HOBBIES = [
    "hiking",
    "reading",
    "photography",
    "swimming",
    "chess",
    "cooking",
    "painting",
    "cycling",
    "running",
    "gardening",
    "fishing",
    "coding",
    "singing",
    "dancing",
    "travel",
    "yoga",
    "camping",
    "knitting",
    "tennis",
    "writing",
    "skiing",
    "surfing",
    "climbing",
    "baking",
    "pottery",
    "golf",
    "boxing",
    "rowing",
    "sailing",
    "karate",
    "judo",
    "archery",
    "birdwatching",
    "origami",
    "juggling",
    "poetry",
    "sketching",
    "drumming",
    "the piano",
    "the violin",
    "the guitar",
    "board games",
    "video games",
    "stamp collecting",
    "calligraphy",
    "woodworking",
    "skating",
    "snowboarding",
    "diving",
    "kayaking",
    "volleyball",
    "basketball",
    "football",
    "badminton",
    "table tennis",
    "bowling",
    "fencing",
    "meditation",
    "jogging",
    "sewing",
]
# Parallel lists for the translation task: HOBBY_TRANSLATIONS[i] = (English, Chinese).
HOBBY_TRANSLATIONS = [
    ("hiking", "爬山"),
    ("reading", "阅读"),
    ("photography", "摄影"),
    ("swimming", "游泳"),
    ("chess", "下棋"),
    ("cooking", "烹饪"),
    ("painting", "画画"),
    ("cycling", "骑行"),
    ("running", "跑步"),
    ("gardening", "养花"),
    ("fishing", "钓鱼"),
    ("coding", "编程"),
    ("singing", "唱歌"),
    ("dancing", "跳舞"),
    ("travel", "旅行"),
    ("yoga", "瑜伽"),
    ("camping", "露营"),
    ("knitting", "织毛衣"),
    ("tennis", "打网球"),
    ("writing", "写作"),
]
# Nicknames in double quotes: the answer must escape them (`\"`), a classic way to break JSON.
NICKNAMES = ["Ace", "Doc", "Red", "Sunny", "Buzz", "Scout", "Bear", "Kit"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
SYLLABLES = [
    "xiao",
    "ming",
    "li",
    "hua",
    "wei",
    "jun",
    "tian",
    "yu",
    "chen",
    "lin",
    "an",
    "bo",
    "kai",
    "mei",
    "zhi",
    "sky",
    "blue",
    "star",
    "moon",
    "leaf",
]
DOMAINS = ["example.com", "mail.com", "qq.com", "163.com", "gmail.com", "outlook.com", "company.cn", "school.edu"]
COUNTRIES = [
    ("France", "Paris", "法国", "巴黎"),
    ("Japan", "Tokyo", "日本", "东京"),
    ("China", "Beijing", "中国", "北京"),
    ("Germany", "Berlin", "德国", "柏林"),
    ("Italy", "Rome", "意大利", "罗马"),
    ("Spain", "Madrid", "西班牙", "马德里"),
    ("Canada", "Ottawa", "加拿大", "渥太华"),
    ("Egypt", "Cairo", "埃及", "开罗"),
    ("Brazil", "Brasilia", "巴西", "巴西利亚"),
    ("India", "New Delhi", "印度", "新德里"),
    ("Russia", "Moscow", "俄罗斯", "莫斯科"),
    ("Australia", "Canberra", "澳大利亚", "堪培拉"),
    ("Korea", "Seoul", "韩国", "首尔"),
    ("Mexico", "Mexico City", "墨西哥", "墨西哥城"),
    ("Greece", "Athens", "希腊", "雅典"),
    ("Norway", "Oslo", "挪威", "奥斯陆"),
]
COLOURS = [
    ("red", "红色", "#FF0000"),
    ("green", "绿色", "#00FF00"),
    ("blue", "蓝色", "#0000FF"),
    ("white", "白色", "#FFFFFF"),
    ("black", "黑色", "#000000"),
    ("yellow", "黄色", "#FFFF00"),
    ("cyan", "青色", "#00FFFF"),
    ("magenta", "品红", "#FF00FF"),
    ("orange", "橙色", "#FFA500"),
    ("purple", "紫色", "#800080"),
    ("gray", "灰色", "#808080"),
    ("pink", "粉色", "#FFC0CB"),
    ("navy", "藏青色", "#000080"),
    ("olive", "橄榄色", "#808000"),
    ("teal", "蓝绿色", "#008080"),
    ("maroon", "栗色", "#800000"),
]

# ---------------------------------------------------------------- phrasings
# Each fact has training phrasings and, after them, HELD_OUT phrasings that only the
# evaluation uses. {} is the value; "{an}" is "a" or "an" before an English occupation.
HELD_OUT = "held_out"
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
    ],
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

# A share of training paragraphs says its facts with made-up connecting words ("Brelo
# vastin Velorin Kasumar, who tromi 35 and klaisa hiking"): the words around a value then
# tell nothing, so the model must find a name, an age or a list by its form and place,
# which is what carries over to phrasings it has never seen.
MADE_UP_PHRASING = 0.3
# Filler characters for made-up Chinese phrasings: no surname characters (a filler must not
# look like part of a name) and none of the held-out phrasings' characters.
ZH_FILLER = [
    c
    for c in "了有这那们来去说要就都也与对把被让给为而且又或但很还再更最已曾将会能该呢吧啊嘛着过"
    if c not in "".join(ZH_SURNAMES)
]

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
FENCE_PROBABILITY = 0.5
ZH_DIGITS = "零一二三四五六七八九"


def _dumps(obj) -> str:
    """The one JSON spelling of answers: ", " and ": " separators, UTF-8 kept as is."""
    return json.dumps(obj, ensure_ascii=False)


def is_held_out(name: str) -> bool:
    """One name in ten (by a stable hash) is reserved for evaluation and never trained on."""
    return zlib.crc32(name.encode("utf-8")) % 10 == 0


def _pick(rng: random.Random, pools: tuple[list, list], held_out: bool):
    """A choice from the training half or from the held-out half of a (train, held-out) pair."""
    return rng.choice(pools[1] if held_out else pools[0])


def _join(items: list[str], zh: bool) -> str:
    """Join a list the way a person writes it: "A、B和C" or "A, B and C"."""
    if len(items) == 1:
        return items[0]
    if zh:
        return "、".join(items[:-1]) + "和" + items[-1]
    return ", ".join(items[:-1]) + " and " + items[-1]


def zh_number(n: int) -> str:
    """A number below 100 in Chinese numerals: 35 -> 三十五, 10 -> 十, 7 -> 七."""
    if not 0 <= n < 100:
        raise ValueError(f"zh_number handles 0..99, got {n}")
    tens, ones = divmod(n, 10)
    if tens == 0:
        return ZH_DIGITS[ones]
    return ("" if tens == 1 else ZH_DIGITS[tens]) + "十" + (ZH_DIGITS[ones] if ones else "")


def _random_date(rng: random.Random, year_lo: int = 1950, year_hi: int = 2025) -> tuple[int, int, int]:
    return rng.randint(year_lo, year_hi), rng.randint(1, 12), rng.randint(1, 28)


def _spell_date(y: int, m: int, d: int, zh: bool, rng: random.Random) -> str:
    """A human spelling of a date; the answers always use ISO YYYY-MM-DD."""
    if zh:
        return rng.choice([f"{y}年{m}月{d}日", f"{y}年{m:02d}月{d:02d}日", f"{y}/{m}/{d}"])
    return rng.choice([f"{MONTHS[m - 1]} {d}, {y}", f"{d} {MONTHS[m - 1]} {y}", f"{y}-{m:02d}-{d:02d}"])


def _email(rng: random.Random) -> str:
    user = rng.choice([rng.choice(SYLLABLES), _word(rng).lower()]) + rng.choice([".", "_", ""]) + rng.choice(SYLLABLES)
    if rng.random() < 0.5:
        user += str(rng.randint(1, 99))
    return f"{user}@{rng.choice(DOMAINS)}"


def _phone(rng: random.Random, zh: bool) -> str:
    if zh:
        digits = "1" + str(rng.randint(3, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(9))
        return rng.choice([digits, f"{digits[:3]}-{digits[3:7]}-{digits[7:]}"])
    a, b, c = rng.randint(200, 999), rng.randint(200, 999), rng.randint(0, 9999)
    return rng.choice([f"+1-{a}-{b}-{c:04d}", f"({a}) {b}-{c:04d}", f"{a}-{b}-{c:04d}"])


def _ipv4(rng: random.Random) -> str:
    first = rng.choice([10, 172, 192, rng.randint(1, 223)])
    return ".".join(str(x) for x in [first, rng.randint(0, 255), rng.randint(0, 255), rng.randint(1, 254)])


def _word(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
    """A generated, pronounceable capitalised word such as "Velorin"."""
    n = rng.randint(*syllables)
    return "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(n)).capitalize()


def _en_name(rng: random.Random) -> str:
    first = rng.choice(EN_FIRST) if rng.random() < 0.4 else _word(rng)
    last = rng.choice(EN_LAST) if rng.random() < 0.4 else _word(rng)
    if rng.random() < 0.05:
        return f'{first} "{rng.choice(NICKNAMES)}" {last}'
    return f"{first} {last}"


def _zh_name(rng: random.Random) -> str:
    given = "".join(rng.choice(ZH_GIVEN) for _ in range(rng.choice([1, 2, 2])))
    if rng.random() < NUMERAL_NAME_SHARE:  # 张三, 李四, 王小五: a numeral as (part of) the given name
        given = rng.choice(["", rng.choice(ZH_GIVEN)]) + rng.choice(ZH_NUMERAL_GIVEN)
    if rng.random() < 0.005:  # a rare character now and then: seen, but too rarely to be merged
        given = given[:-1] + rng.choice(RARE_HAN)
    return rng.choice(ZH_SURNAMES) + given


def person_name(rng: random.Random, zh: bool, held_out: bool) -> str:
    """A person's name from the training pool (9 names in 10) or the held-out pool.

    Held-out names are made as they always were (so the held-out evaluation sets stay the
    same); training names come from the many generators of name_generators, and
    no training name has the signature of a held-out generator (issue 33)."""
    while True:
        if held_out:
            name = _zh_name(rng) if zh else _en_name(rng)
        elif zh:
            name = name_generators.training_zh_name(rng, _zh_name, ZH_GIVEN, ZH_SURNAMES)
        else:
            name = name_generators.training_en_name(rng, EN_FIRST, EN_LAST, NICKNAMES)
        if (
            is_held_out(name) == held_out
            and name not in DEMO_NAMES
            and (held_out or name_generators.held_out_generator(name) is None)
        ):
            return name


def _city(rng: random.Random, zh: bool) -> str:
    if rng.random() < 0.6:
        return rng.choice(ZH_CITIES if zh else EN_CITIES)
    if zh:
        return "".join(rng.sample(ZH_CITY_CHARS, 2))
    return _word(rng, (2, 3)) + rng.choice(["", "", " City", "ville", " Bay"])


# A share of training requests that list their fields asks for one or two keys only
# ("name and age"): without them a model has never closed an answer after two keys, and
# asked for name and age it writes `"age": 24, "age": 24, ...` or an age that runs on in
# digits (issue 33). Held-out requests keep 3+ keys, so eval_extraction's sets stay the same.
SHORT_REQUEST = 0.2


def person_example(rng: random.Random, held_out: bool = False) -> dict:
    """One extraction example: a short paragraph about a person -> JSON of some of its facts.

    The paragraph mentions 3 to 8 facts; an instruction that lists fields asks for some of
    them (the rest are distractors; in training, sometimes only one or two: SHORT_REQUEST),
    one that does not asks for all of them.
    """
    zh = rng.random() < 0.5
    mentioned = ["name"] + rng.sample(KEY_ORDER[1:], rng.randint(2, 7))
    age = rng.randint(18, 90)
    by, bm, bd = 2025 - age, rng.randint(1, 12), rng.randint(1, 28)
    facts = {
        "name": person_name(rng, zh, held_out),
        "age": age,
        "city": _city(rng, zh),
        "email": _email(rng),
        "phone": _phone(rng, zh),
        "occupation": rng.choice(ZH_JOBS if zh else EN_JOBS),
        "hobbies": rng.sample(ZH_HOBBIES if zh else EN_HOBBIES, rng.randint(1, 4)),
        "birthday": f"{by}-{bm:02d}-{bd:02d}",
    }
    text = _paragraph(rng, facts, mentioned, zh, held_out)

    strict = rng.random() < 0.5
    instr_zh = zh if rng.random() < 0.8 else not zh  # sometimes instruction and text differ in language
    instr = _pick(
        rng, (ZH_STRICT if strict else ZH_LOOSE) if instr_zh else (EN_STRICT if strict else EN_LOOSE), held_out
    )
    keys = mentioned
    if "{fields}" in instr and len(mentioned) > 3 and rng.random() < 0.7:
        keys = ["name"] + rng.sample([k for k in mentioned if k != "name"], rng.randint(2, len(mentioned) - 2))
    if not held_out and "{fields}" in instr and rng.random() < SHORT_REQUEST:
        # one or two keys (training only, so the held-out sets stay as they were)
        others = [k for k in mentioned if k != "name"]
        keys = ["name", rng.choice(others)] if rng.random() < 0.75 else [rng.choice(mentioned)]
    keys = [k for k in KEY_ORDER if k in keys]
    system = None
    if rng.random() < 0.4:
        system = rng.choice(ZH_SYSTEMS if zh else EN_SYSTEMS)
    answer = _dumps({k: facts[k] for k in keys})
    if not strict and system not in STRICT_SYSTEMS and rng.random() < FENCE_PROBABILITY:
        answer = "```json\n" + answer + "\n```"
    return {
        "task": "extract_person",
        "system": system,
        "user": instr.format(fields=_join(keys, False)) + "\n" + text,
        "assistant": answer,
    }


def unfence(text: str) -> str:
    """The text inside a markdown ```json fence (the way loosely worded requests' answers are
    written, whitespace around it allowed), or ``text`` unchanged when it is not fenced."""
    inner = text.strip()
    if inner.startswith("```json") and inner.endswith("```"):
        return inner[len("```json") : -len("```")].strip()
    return text


# Openers composed from pieces (issue 33, stage 9). Stage 8 missed 92% of the held-out texts
# opening "We interviewed NAME" and 95% of those opening "档案里写着NAME" (against 5-28% for
# the other held-out openers): after an unseen verb ("We visited", "We zorbled": 0/40) or
# unseen characters the model starts the name at the wrong token. A share of training
# paragraphs therefore opens with a subject and a verb (real or made-up) or, in Chinese, with
# random characters from the whole CJK block (split into byte-level tokens like the rarest
# names, so such a token no longer says "this is a name") and a connecting word. No verb is a
# held-out opener's and no random character is one of theirs, so those openers stay unseen.
COMPOSED_OPENER = 0.2
OPENER_SUBJECTS = [
    "We",
    "They",
    "I",
    "He",
    "She",
    "You",
    "My sister",
    "Our team",
    "The police",
    "Everyone",
    "The doctor",
    "Reporters",
    "The committee",
    "A neighbour",
    "Yesterday we",
    "Last year they",
    "Today I",
    "The children",
    "Her boss",
    "Nobody",
    "Somebody",
    "The judges",
    "Our school",
]
OPENER_VERBS = [
    "visited",
    "photographed",
    "called",
    "emailed",
    "thanked",
    "praised",
    "hired",
    "helped",
    "invited",
    "followed",
    "watched",
    "trained",
    "phoned",
    "greeted",
    "paid",
    "warned",
    "found",
    "chose",
    "elected",
    "saw",
    "heard",
    "recommended",
    "filmed",
    "drove",
    "coached",
    "taught",
    "adopted",
    "rescued",
    "contacted",
    "quoted",
    "admired",
    "remembered",
    "knew",
    "asked",
    "told",
    "wrote to",
    "waited for",
    "voted for",
    "looked after",
    "worked with",
    "sat next to",
    "played chess with",
    "had lunch with",
    "talked about",
]
ZH_OPENER_CONNECTORS = ["是", "叫", "：", "，", "显示", "有", "提到了", "里有", "见到了", "记的是", "中是", "中的"]
# Characters no composed Chinese opener uses: surnames (the name must start where its surname
# is), held-out given names and compound surnames, and the held-out openers' own characters.
_ZH_OPENER_EXCLUDED = (
    set("".join(ZH_SURNAMES))
    | set(name_generators.HELD_OUT_HAN)
    | set(
        "".join(
            name_generators.HELD_OUT_COMPOUND_SURNAMES
            + name_generators.TRAINING_COMPOUND_SURNAMES
            + ZH_GENERALISATION_OPENERS
        ).replace("{n}", "")
    )
)


def random_han(rng: random.Random, n: int) -> str:
    """``n`` random characters of the CJK block, none of them excluded (_ZH_OPENER_EXCLUDED)."""
    chars = []
    while len(chars) < n:
        ch = chr(rng.randint(name_generators.CJK_FIRST, name_generators.CJK_LAST))
        if ch not in _ZH_OPENER_EXCLUDED:
            chars.append(ch)
    return "".join(chars)


# Stage 11 answered `档案` to every text opening "档案里写着NAME": 档 and 案 are byte-level like a
# rare name's characters, and 里写着 is no connector it had seen. A share of composed openers
# therefore ends in a made-up connector of the vocabulary's own single-token characters (写 and
# 里 are such tokens), so the name starts at its surname whatever word comes before it.
MADE_UP_CONNECTOR = 0.4


def made_up_connector(rng: random.Random) -> str:
    """1-3 single-token Han characters (vocab_letter_tokens), none of them excluded
    (_ZH_OPENER_EXCLUDED: no surname, held-out character or held-out opener's character)."""
    han = [c for c in vocab_letter_tokens()[1] if c not in _ZH_OPENER_EXCLUDED]
    return "".join(rng.choice(han) for _ in range(rng.randint(1, 3)))


def composed_opener(rng: random.Random, zh: bool) -> str:
    """A training opener made of pieces: "Our team photographed {n}, who", "We zorbled {n}, who",
    "鞅瀣显示{n}，" ({n} is the name)."""
    if zh:
        head = random_han(rng, rng.randint(1, 4))
        if rng.random() < 0.3:
            head = rng.choice(ZH_FILLER) + head
        connector = rng.choice(ZH_OPENER_CONNECTORS)
        # drawn from a side generator seeded by the opener so far: the corpus's own draws stay
        # as they were, and so do eval_extraction's held-out sets (they exclude its requests)
        side = random.Random(head + connector)
        if side.random() < MADE_UP_CONNECTOR:
            connector = made_up_connector(side)
        return head + connector + "{n}，"
    verb = rng.choice(OPENER_VERBS) if rng.random() < 0.6 else _word(rng, (1, 2)).lower() + rng.choice(["ed", "s"])
    return f"{rng.choice(OPENER_SUBJECTS)} {verb} " + "{n}" + rng.choice([", who", ", who", ". This person"])


def _filler(rng: random.Random, zh: bool) -> str:
    """Made-up connecting words: 1-3 generated lowercase words, or 1-3 filler characters."""
    if zh:
        return "".join(rng.choice(ZH_FILLER) for _ in range(rng.randint(1, 3)))
    return " ".join(_word(rng, (1, 2)).lower() for _ in range(rng.randint(1, 3)))


def _made_up_phrasings(rng: random.Random, zh: bool) -> tuple[dict, tuple[list, list]]:
    """Fact phrasings and an opener of made-up words (training only), shaped like _pick's pools."""
    if zh:
        facts = {k: ([_filler(rng, True) + ("{}岁" if k == "age" else "{}")], []) for k in ZH_FACTS}
        opener = rng.choice([_filler(rng, True) + "{n}，", _filler(rng, True) + "，{n}"])
    else:
        facts = {k: ([_filler(rng, False) + (" {an} {}" if k == "occupation" else " {}")], []) for k in EN_FACTS}
        opener = _filler(rng, False).capitalize() + rng.choice([" {n}, who", ", {n}"])
    return facts, ([opener], [])


def _paragraph(
    rng: random.Random, facts: dict, mentioned: list[str], zh: bool, held_out: bool, generalisation: bool = False
) -> str:
    """Say the ``mentioned`` facts (besides the name) in a shuffled order, in one or two
    sentences; in training, sometimes with made-up words (MADE_UP_PHRASING). A held-out
    paragraph for eval_generalisation (``generalisation``) opens with one of its own openers."""
    if generalisation and not held_out:
        raise ValueError("generalisation paragraphs use held-out phrasings: pass held_out=True")
    order = [k for k in mentioned if k != "name"]
    rng.shuffle(order)
    name = facts["name"]
    fact_pools, openers = (ZH_FACTS, ZH_OPENERS) if zh else (EN_FACTS, EN_OPENERS)
    if generalisation:
        openers = ([], ZH_GENERALISATION_OPENERS if zh else EN_GENERALISATION_OPENERS)
    if not held_out and rng.random() < MADE_UP_PHRASING:
        made_up, made_up_opener = _made_up_phrasings(rng, zh)
        fact_pools = {k: made_up[k] if rng.random() < 0.6 else pool for k, pool in fact_pools.items()}
        openers = made_up_opener if rng.random() < 0.6 else openers
    if not held_out and rng.random() < COMPOSED_OPENER:
        openers = ([composed_opener(rng, zh)], [])
    if zh:
        age = facts["age"] if rng.random() < 0.7 else zh_number(facts["age"])
        values = dict(
            facts,
            age=age,
            hobbies=_join(facts["hobbies"], True),
            birthday=_spell_date(*map(int, facts["birthday"].split("-")), True, rng),
        )
        parts = [_pick(rng, fact_pools[k], held_out).format(values[k]) for k in order]
        opener = _pick(rng, openers, held_out).format(n=name)
        pronoun = rng.choice("他她")
        pieces = [opener + parts[0]] + [(pronoun if rng.random() < 0.2 else "") + p for p in parts[1:]]
        return "，".join(pieces).replace("，，", "，") + "。"
    values = dict(
        facts,
        hobbies=_join(facts["hobbies"], False),
        birthday=_spell_date(*map(int, facts["birthday"].split("-")), False, rng),
    )
    an = "an" if facts["occupation"][0] in "aeiou" else "a"
    if {"age", "occupation"} <= set(order) and rng.random() < 0.3:
        # "Maria Lopez is a 41-year-old nurse from Madrid who enjoys ...": three facts at once
        head = (
            f"{name} is {'an' if str(facts['age'])[0] == '8' or facts['age'] in (11, 18) else 'a'} "
            f"{facts['age']}-year-old {facts['occupation']}"
        )
        rest = [k for k in order if k not in ("age", "occupation")]
        if "city" in rest and rng.random() < 0.6:
            head += f" from {facts['city']}"
            rest.remove("city")
        parts = [_pick(rng, fact_pools[k], held_out).format(values[k], an=an) for k in rest]
        text = head + (f" who {_join(parts, False)}." if parts else ".")
        return text if held_out else _with_distractor(rng, text, name)
    parts = [_pick(rng, fact_pools[k], held_out).format(values[k], an=an) for k in order]
    if not held_out and rng.random() < LATE_NAME:
        text = rng.choice(LATE_NAME_TEMPLATES).format(facts=_join(parts, False), n=name)
        return _with_distractor(rng, text, name)
    opener = _pick(rng, openers, held_out).format(n=name)
    pronoun = rng.choice(["He", "She", "They"])
    if pronoun == "They":  # "They is" would teach bad English; keep the name-only form then
        pronoun = rng.choice(["He", "She"])
    cut = rng.randint(1, len(parts))  # two sentences, the second one starting with a pronoun
    text = f"{opener} {_join(parts[:cut], False)}."
    if parts[cut:]:
        text += f" {pronoun} {_join(parts[cut:], False)}."
    return text if held_out else _with_distractor(rng, text, name)


# English training paragraphs sometimes name the person only after the facts, or mention
# a second person (issue 33): the name is then found by what the text says about it, not
# by its place at the start, and the answer is about the person the facts are about.
LATE_NAME = 0.15
LATE_NAME_TEMPLATES = [
    "The person who {facts} is called {n}.",
    "Here is someone who {facts}. The name is {n}.",
    "There is a person who {facts}: {n}.",
    "Someone who {facts}? That is {n}.",
    "This note is about a person who {facts}. Their name is {n}.",
]
DISTRACTOR = 0.2
DISTRACTOR_BEFORE = [
    "{d} wrote this note.",
    "From the notes of {d}:",
    "{d} told us about a friend.",
    "A message from {d}.",
]
DISTRACTOR_AFTER = [
    "{n} shares a flat with {d}.",
    "{d} is a neighbour of {n}.",
    "A friend, {d}, introduced us.",
    "{n} often visits {d}.",
    "The manager of {n} is {d}.",
]


def _with_distractor(rng: random.Random, text: str, name: str) -> str:
    """``text``, sometimes with a sentence about another person before or after it."""
    if rng.random() >= DISTRACTOR:
        return text
    other = person_name(rng, False, False)
    if rng.random() < 0.4:
        return rng.choice(DISTRACTOR_BEFORE).format(d=other) + " " + text
    return text + " " + rng.choice(DISTRACTOR_AFTER).format(d=other, n=name)


def date_example(rng: random.Random) -> dict:
    zh = rng.random() < 0.5
    if rng.random() < 0.5:
        y, m, d = _random_date(rng)
        instr = "把日期转换成 YYYY-MM-DD 格式：" if zh else "Convert this date to ISO format (YYYY-MM-DD): "
        return {
            "task": "date",
            "system": None,
            "user": instr + _spell_date(y, m, d, zh, rng),
            "assistant": f"{y}-{m:02d}-{d:02d}",
        }
    dates = [_random_date(rng, 1990, 2030) for _ in range(rng.randint(1, 3))]
    if zh:
        events = ["会议", "考试", "发布会", "婚礼", "旅行", "面试"]
        text = "，".join(f"{rng.choice(events)}在{_spell_date(*dt, True, rng)}" for dt in dates) + "。"
        instr = "找出下面文本中的所有日期，以 JSON 列表输出（YYYY-MM-DD）：\n"
    else:
        events = ["The meeting", "The exam", "The launch", "The wedding", "The trip", "The interview"]
        text = " ".join(f"{rng.choice(events)} is on {_spell_date(*dt, False, rng)}." for dt in dates)
        instr = "List every date in the text as a JSON array of YYYY-MM-DD strings:\n"
    return {
        "task": "dates",
        "system": None,
        "user": instr + text,
        "assistant": _dumps([f"{y}-{m:02d}-{d:02d}" for y, m, d in dates]),
    }


def email_example(rng: random.Random) -> dict:
    emails = [_email(rng) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.5:
        text = "。".join(f"请联系{e}" for e in emails) + "。"
        instr = "提取下面文本中的邮箱地址，输出 JSON 列表：\n"
    else:
        text = " ".join(f"Write to {e} for details." for e in emails)
        instr = "Extract the email addresses from this text as a JSON list:\n"
    return {"task": "emails", "system": None, "user": instr + text, "assistant": _dumps(emails)}


def ip_example(rng: random.Random) -> dict:
    ips = [_ipv4(rng) for _ in range(rng.randint(1, 2))]
    y, m, d = _random_date(rng, 2020, 2025)
    lines = [
        f"{y}-{m:02d}-{d:02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
        f"{rng.choice(['connection from', 'login failed for', 'request from', 'blocked'])} {ip} "
        f"port {rng.choice([22, 80, 443, 8080, 3306])}"
        for ip in ips
    ]
    if rng.random() < 0.5:
        return {
            "task": "ipv4",
            "system": None,
            "user": "Find the IPv4 addresses in this log:\n" + "\n".join(lines),
            "assistant": _dumps(ips),
        }
    return {
        "task": "ipv4",
        "system": None,
        "user": "找出这段日志里的 IP 地址，输出 JSON：\n" + "\n".join(lines),
        "assistant": _dumps({"ips": ips}),
    }


def phone_example(rng: random.Random) -> dict:
    zh = rng.random() < 0.5
    phone = _phone(rng, zh)
    if zh:
        user = f"提取电话号码，以 JSON 输出：\n有事请打{phone}，{rng.choice(['周一到周五', '工作日', '全天'])}都可以。"
    else:
        user = f"Extract the phone number as JSON:\nCall us at {phone} {rng.choice(['any time', 'on weekdays', 'after 9am'])}."
    return {"task": "phone", "system": None, "user": user, "assistant": _dumps({"phone": phone})}


def colour_example(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        en, zh, hx = rng.choice(COLOURS)
        if rng.random() < 0.5:
            return {"task": "colour", "system": None, "user": f"What is the hex colour code of {en}?", "assistant": hx}
        return {"task": "colour", "system": None, "user": f"{zh}的十六进制颜色代码是什么？", "assistant": hx}
    codes = ["#" + "".join(rng.choice("0123456789abcdef") for _ in range(6)) for _ in range(rng.randint(1, 3))]
    props = ["color", "background", "border-color", "fill"]
    css = " ".join(f"{rng.choice(props)}: {c};" for c in codes)
    return {
        "task": "colour",
        "system": None,
        "user": "Extract the hex colours from this CSS as a JSON list:\n" + css,
        "assistant": _dumps(codes),
    }


def qa_example(rng: random.Random) -> dict:
    kind = rng.randrange(5)
    en, cap, zh_country, zh_cap = rng.choice(COUNTRIES)
    if kind == 0:
        return {
            "task": "qa",
            "system": rng.choice([None, "You are a helpful assistant."]),
            "user": f"What is the capital of {en}?",
            "assistant": f"The capital of {en} is {cap}.",
        }
    if kind == 1:
        return {
            "task": "qa",
            "system": None,
            "user": f"{zh_country}的首都是哪里？",
            "assistant": f"{zh_country}的首都是{zh_cap}。",
        }
    if kind == 2:
        return {
            "task": "qa",
            "system": None,
            "user": f"Answer in JSON: what is the capital of {en}?",
            "assistant": _dumps({"country": en, "capital": cap}),
        }
    if kind == 3:
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        return {
            "task": "qa",
            "system": None,
            "user": rng.choice([f"What is {a} + {b}?", f"{a}加{b}等于多少？"]),
            "assistant": f"{a} + {b} = {a + b}",
        }
    en_word, zh_word = rng.choice(HOBBY_TRANSLATIONS)
    if rng.random() < 0.5:
        return {"task": "qa", "system": None, "user": f"Translate to Chinese: {en_word}", "assistant": zh_word}
    return {"task": "qa", "system": None, "user": f"把这个词翻译成英文：{zh_word}", "assistant": en_word}


def prose_example(rng: random.Random) -> dict:
    emoji = rng.choice(EMOJI)
    if rng.random() < 0.5:
        city = rng.choice(EN_CITIES)
        hobby = rng.choice(EN_HOBBIES)
        weather = rng.choice(["sunny", "rainy", "windy", "cold", "warm"])
        answer = f"{city} was {weather} today. People went out for {hobby}, and the cafes were full by noon. {emoji}"
        return {
            "task": "prose",
            "system": None,
            "user": f"Write a short note about a day in {city}.",
            "assistant": answer,
        }
    city = rng.choice(ZH_CITIES)
    hobby = rng.choice(ZH_HOBBIES)
    weather = rng.choice(["晴天", "下雨", "刮风", "很冷", "很暖和"])
    answer = f"今天{city}{weather}。很多人出门{hobby}，中午的时候咖啡馆都坐满了。{emoji}"
    return {"task": "prose", "system": None, "user": f"写一段关于{city}的一天的短文。", "assistant": answer}


# ---------------------------------------------------------------- tool calls
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


def copy_example(rng: random.Random, held_out: bool = False) -> dict:
    """A short request whose whole answer is copied from it: a person's name, or a list of
    generated names, words and numbers repeated verbatim. Dense copying teaches the model
    the mechanism (attend to the earlier occurrence, emit the next token) that every
    extraction answer relies on; a tiny model learns it far sooner from these than from
    a few copied tokens per paragraph."""
    zh = rng.random() < 0.5
    if rng.random() < 0.5:
        facts = {
            "name": person_name(rng, zh, held_out),
            "age": rng.randint(18, 90),
            "city": _city(rng, zh),
            "email": _email(rng),
            "phone": _phone(rng, zh),
            "occupation": rng.choice(ZH_JOBS if zh else EN_JOBS),
            "hobbies": rng.sample(ZH_HOBBIES if zh else EN_HOBBIES, rng.randint(1, 3)),
            "birthday": "2000-01-01",
        }
        text = _paragraph(rng, facts, ["name"] + rng.sample(["age", "city", "occupation", "hobbies"], 2), zh, held_out)
        question = rng.choice(
            ["这段话里的人叫什么名字？只回答名字。", "名字是什么？"]
            if zh
            else ["What is the person's name? Answer with the name only.", "Who is this text about?"]
        )
        return {"task": "copy", "system": None, "user": question + "\n" + text, "assistant": facts["name"]}
    items = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        items.append(
            [
                lambda: person_name(rng, zh, held_out),
                lambda: _word(rng, (1, 3)),
                lambda: str(rng.randint(0, 9999)),
                lambda: _city(rng, zh),
                lambda: _email(rng),
            ][kind]()
        )
    sep = "、" if zh else ", "
    question = rng.choice(["照抄下面的内容：", "重复一遍："] if zh else ["Repeat exactly:", "Copy this:"])
    return {"task": "copy", "system": None, "user": question + "\n" + sep.join(items), "assistant": sep.join(items)}


def copy_drill_example(rng: random.Random, held_out: bool = False) -> dict:
    """A short, dense copying exercise for the first phase of training (the copy-first
    curriculum of scripts/train_tiny_model.py): 2-6 generated names, words, numbers, cities
    or hobbies, repeated verbatim as a list or as a JSON array. Nearly every answer token is
    a copy, so a tiny model forms the attention that finds the earlier occurrence of the
    current token and emits the one after it (an induction head) in a few hundred steps."""
    zh = rng.random() < 0.5
    # e-mails too: a local part of generated syllables is copied character by character;
    # and random strings, so that every token is copied often (random_string)
    makers = [
        lambda: person_name(rng, zh, held_out),
        lambda: _unsigned_word(rng),
        lambda: str(rng.randint(0, 9999)),
        lambda: _city(rng, zh),
        lambda: rng.choice(ZH_HOBBIES if zh else EN_HOBBIES),
        lambda: _email(rng),
        lambda: random_string(rng, zh),
        # four times in the list: rare tokens need a hundred emissions, not a few (stage 12)
        lambda: vocab_string(rng, zh),
        lambda: vocab_string(rng, zh),
        lambda: vocab_string(rng, zh),
        lambda: vocab_string(rng, zh),
    ]
    items = [rng.choice(makers)() for _ in range(rng.randint(2, 6))]
    sep = "、" if zh else ", "
    if rng.random() < 0.5:
        question = rng.choice(["照抄下面的内容：", "重复一遍："] if zh else ["Repeat exactly:", "Copy this:"])
        return {
            "task": "copy_drill",
            "system": None,
            "user": question + "\n" + sep.join(items),
            "assistant": sep.join(items),
        }
    question = rng.choice(
        ["把下面的内容写成 JSON 数组：", "列成 JSON 列表："]
        if zh
        else ["Write these as a JSON array:", "List them as JSON:"]
    )
    return {"task": "copy_drill", "system": None, "user": question + "\n" + sep.join(items), "assistant": _dumps(items)}


def _unsigned_word(rng: random.Random) -> str:
    """A generated word (_word) without a held-out generator's signature: a drill copies
    name-like words, and "Sundruklum" or "Flaisais" would be a held-out generator's names."""
    while True:
        word = _word(rng, (1, 3))
        if name_generators.held_out_generator(word) is None:
            return word


# The characters a drill's random Chinese string is half made of: those of the corpus's own
# Chinese pools and drill questions (so 容 of 内容, in every copy-drill question and never in an
# answer, is copied too), less the held-out given-name characters and the held-out openers'.
DRILL_HAN = sorted(
    set(
        "".join(
            ZH_GIVEN
            + ZH_SURNAMES
            + ZH_CITY_CHARS
            + ZH_HOBBIES
            + ZH_JOBS
            + ZH_CITIES
            + name_generators.TRAINING_COMPOUND_SURNAMES
        )
        + "照抄下面的内容重复一遍把写成数组列表"
        + "中文数字阿拉伯这些是多少用回答"
    )
    - set(name_generators.HELD_OUT_HAN)
    - set("".join(ZH_GENERALISATION_OPENERS).replace("{n}", ""))
)


def random_string(rng: random.Random, zh: bool) -> str:
    """A string with no structure to copy: 3-12 random letters (sometimes capitalised) or 1-4
    CJK characters, each from DRILL_HAN or (half the time) from anywhere in the block. Stage
    8's names went wrong at the tokens copied least (median 8 times an epoch against about
    500 for a name's tokens; 容 never): random strings copy the vocabulary's rare tokens. None
    has a held-out generator's signature or holds a held-out compound surname or character."""
    while True:
        if zh:
            text = "".join(
                rng.choice(DRILL_HAN) if rng.random() < 0.5 else random_han(rng, 1) for _ in range(rng.randint(1, 4))
            )
            if any(s in text for s in name_generators.HELD_OUT_COMPOUND_SURNAMES):
                continue
        else:
            text = "".join(rng.choice(name_generators.LETTERS) for _ in range(rng.randint(3, 12)))
            text = text.capitalize() if rng.random() < 0.5 else text
        if name_generators.held_out_generator(text) is None:
            return text


# The bundled model's tokenizer (every stage after the first keeps it): vocab_string copies its tokens.
TOKENIZER_FILE = Path(__file__).resolve().parent.parent / "minisglang" / "assets" / "tiny-json-llama" / "tokenizer.json"


@functools.cache
def vocab_letter_tokens() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The tokenizer's tokens that are letters, decoded: (Latin-letter tokens such as "Book" or
    "urant", single Han characters). Left out: the held-out openers' words and characters and
    the held-out given-name characters (as in DRILL_HAN), so a drill never writes them."""
    from tokenizers import Tokenizer  # only the corpus's drills need it

    tok = Tokenizer.from_file(str(TOKENIZER_FILE))
    pieces = [tok.decode([i]) for i in range(tok.get_vocab_size())]
    opener_text = " ".join(EN_GENERALISATION_OPENERS).lower()
    latin = [p for p in pieces if p.isascii() and p.isalpha() and (len(p) < 3 or p.lower() not in opener_text)]
    excluded_han = set(name_generators.HELD_OUT_HAN) | set("".join(ZH_GENERALISATION_OPENERS).replace("{n}", ""))
    han = [p for p in pieces if len(p) == 1 and "\u4e00" <= p <= "\u9fff" and p not in excluded_han]
    return tuple(sorted(set(latin))), tuple(sorted(set(han)))


# Stage 11's drills emitted each letter token about 5 times an epoch, `Book` 26 times in the
# whole run, too few to move it (teacher-forced probability 0.001 at a name's start): three in four
# of a vocab_string's tokens are drawn from those that the main corpus's answers never hold.
RARE_TOKEN_SHARE = 0.75
RARE_BELOW = 1  # a token is rare when a 4,000-example sample of answers holds it fewer times


@functools.cache
def rare_letter_tokens() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The vocab_letter_tokens (Latin, Han) that the answers of make_corpus(4000, seed=0) hold
    fewer than RARE_BELOW times: the tokens the model is almost never asked to emit."""
    from collections import Counter

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_FILE))
    counts = Counter(i for ex in make_corpus(4000, seed=0) for i in tok.encode(ex["assistant"]).ids)
    latin, han = vocab_letter_tokens()
    return tuple(t for t in latin if counts[tok.token_to_id(t)] < RARE_BELOW), tuple(
        t for t in han if counts[tok.encode(t).ids[0]] < RARE_BELOW
    )


def vocab_string(rng: random.Random, zh: bool) -> str:
    """2-3 random Latin-letter tokens of the tokenizer written together ("qoBookurant"), or 2-4
    of its Han characters, each 3 times in 4 one that answers never hold (rare_letter_tokens).
    A token no answer holds is a token the model has never emitted: the bundled model's answers
    in one epoch held 3,470 of its 4,096 tokens, and names starting with the held-out `Book` lost
    it (`Bookvoun Brolgea` -> `Brolgea`). A string that merely holds such a word after other
    letters has no held-out signature (held_out_generator checks the start of each letter run),
    and none is kept that has one."""
    latin, han = vocab_letter_tokens()
    rare_latin, rare_han = rare_letter_tokens()

    def pick(pool: tuple[str, ...], rare: tuple[str, ...]) -> str:
        return rng.choice(rare if rare and rng.random() < RARE_TOKEN_SHARE else pool)

    while True:
        if zh:
            text = "".join(pick(han, rare_han) for _ in range(rng.randint(2, 4)))
            if any(s in text for s in name_generators.HELD_OUT_COMPOUND_SURNAMES):
                continue
        else:
            text = "".join(pick(latin, rare_latin) for _ in range(rng.randint(2, 3)))
        if name_generators.held_out_generator(text) is None:
            return text


def numeral_drill_example(rng: random.Random, held_out: bool = False) -> dict:
    """Chinese-numeral ages to digits, the one conversion an extraction answer needs
    (三十五岁 -> 35): 1-4 ages, alone or in a short sentence about a named person (whose
    name may itself hold a numeral, 张三), answered as a JSON list or ``{"age": N}``."""
    ages = [rng.randint(1, 99) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.5:
        question = rng.choice(["把中文数字写成阿拉伯数字，输出 JSON 列表：", "这些数字是多少？用 JSON 列表回答："])
        return {
            "task": "zh_number",
            "system": None,
            "user": question + "\n" + "、".join(zh_number(a) for a in ages),
            "assistant": _dumps(ages),
        }
    name, age = person_name(rng, True, held_out), ages[0]
    sentence = rng.choice(["{n}今年{a}岁。", "{n}{a}岁了。", "{n}，{a}岁。", "{n}已经{a}岁了。"]).format(
        n=name, a=zh_number(age)
    )
    question = rng.choice(["这个人几岁？以 JSON 输出：", "How old is this person? Answer as JSON:"])
    return {"task": "zh_number", "system": None, "user": question + "\n" + sentence, "assistant": _dumps({"age": age})}


# A share of the copy-drill stream is numeral conversion (numeral_drill_example).
NUMERAL_DRILL_SHARE = 0.2


def copy_drill_corpus(n_examples: int, seed: int = 0) -> list[dict]:
    """``n_examples`` seeded copy drills and numeral drills (training names only)."""
    rng = random.Random(seed * 7919 + 1)
    return [
        numeral_drill_example(rng) if rng.random() < NUMERAL_DRILL_SHARE else copy_drill_example(rng)
        for _ in range(n_examples)
    ]


def long_document_example(rng: random.Random, held_out: bool = False) -> dict:
    """A long extraction prompt (rules and a schema, the facts among filler): scripts/long_documents.py."""
    import long_documents  # imported here: it builds on this module's pools and paragraphs

    return long_documents.long_document_example(rng, held_out)


# The task mix: extraction dominates because it is what the chapters demonstrate; tool
# calls are chapter 07's; copying is the skill both need.
TASKS = [
    (person_example, 0.45),
    (long_document_example, 0.08),
    (tool_example, 0.22),
    (copy_example, 0.10),
    (numeral_drill_example, 0.02),
    (date_example, 0.025),
    (email_example, 0.025),
    (ip_example, 0.025),
    (phone_example, 0.025),
    (colour_example, 0.015),
    (qa_example, 0.02),
    (prose_example, 0.015),
]


def make_corpus(n_examples: int, seed: int = 0) -> list[dict]:
    """Return ``n_examples`` seeded chat examples (dicts with task/system/user/assistant)."""
    if n_examples < 1:
        raise ValueError(f"n_examples must be at least 1, got {n_examples}")
    rng = random.Random(seed)
    makers, weights = zip(*TASKS)
    return [rng.choices(makers, weights)[0](rng) for _ in range(n_examples)]


def _heldout(maker, n: int, train: list[dict], seed: int) -> list[dict]:
    rng = random.Random(seed)
    seen = {ex["user"] for ex in train}
    out: list[dict] = []
    while len(out) < n:
        ex = maker(rng, held_out=True)
        if ex["user"] not in seen:
            seen.add(ex["user"])
            out.append(ex)
    return out


def heldout_extraction_prompts(n: int, train: list[dict], seed: int = 12345) -> list[dict]:
    """``n`` extraction examples with held-out names and phrasings, none of whose user turns is in ``train``."""
    return _heldout(person_example, n, train, seed)


def heldout_tool_prompts(n: int, train: list[dict], seed: int = 12345) -> list[dict]:
    """``n`` tool conversations with held-out request phrasings and names, none of whose user turns is in ``train``."""
    return _heldout(tool_example, n, train, seed)


def to_messages(example: dict, with_answer: bool = True) -> list[dict]:
    """The chat messages of one example, in the Hugging Face ``[{"role", "content"}]`` form
    (pass ``example.get("tools")`` to the chat template alongside)."""
    msgs = []
    if example["system"]:
        msgs.append({"role": "system", "content": example["system"]})
    msgs.append({"role": "user", "content": example["user"]})
    msgs.extend(example.get("history", []))
    if with_answer:
        answer = {"role": "assistant", "content": example["assistant"]}
        if example.get("tool_calls"):
            answer["tool_calls"] = example["tool_calls"]
        msgs.append(answer)
    return msgs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=40000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(".cache/tiny-json-llama/corpus.jsonl"))
    args = ap.parse_args()
    corpus = make_corpus(args.examples, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for ex in corpus:
            f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    print(f"wrote {len(corpus)} examples to {args.out}")


if __name__ == "__main__":
    main()
