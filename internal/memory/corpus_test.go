package memory

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// The labelled retrieval set's generator: a person's memory of a few
// years, as daily logs, topic notes and MEMORY.md. Each entry is about
// one topic and one aspect of it (the car's repair, the landlord's
// contract), named by one of the concept's synonyms and told among words
// that go with the topic and the aspect, as people write. A labelled
// entry is the only one about its (topic, aspect) pair; its question
// names the pair either with the entry's own words (literal) or with
// other synonyms only (paraphrase: no content word in common, so full
// text alone cannot find it; only co-occurrence learned from the rest of
// the corpus links the words).

type concept struct {
	forms   []string // synonyms
	context []string // words that go with the concept
}

var topics = []concept{
	{[]string{"car", "automobile", "vehicle"}, []string{"engine", "tyres", "fuel", "parking", "mileage", "dashboard"}},
	{[]string{"doctor", "physician", "gp"}, []string{"clinic", "prescription", "symptoms", "checkup", "referral", "bloodwork"}},
	{[]string{"apartment", "flat", "residence"}, []string{"landlord", "rent", "lease", "balcony", "radiator", "neighbours"}},
	{[]string{"boss", "manager", "supervisor"}, []string{"office", "standup", "team", "quarterly", "promotion", "headcount"}},
	{[]string{"daughter", "kid", "child"}, []string{"school", "homework", "teacher", "playground", "bedtime", "lunchbox"}},
	{[]string{"dog", "puppy", "hound"}, []string{"leash", "walkies", "kennel", "fetch", "collar", "treats"}},
	{[]string{"cat", "kitten", "feline"}, []string{"litter", "scratching", "catnip", "whiskers", "purring", "hairball"}},
	{[]string{"mortgage", "loan", "credit"}, []string{"interest", "repayment", "bank", "rate", "deposit", "statement"}},
	{[]string{"laptop", "computer", "pc"}, []string{"keyboard", "battery", "screen", "charger", "software", "backup"}},
	{[]string{"phone", "mobile", "cellphone"}, []string{"sim", "contacts", "ringtone", "apps", "voicemail", "roaming"}},
	{[]string{"flight", "plane", "airline"}, []string{"airport", "boarding", "luggage", "gate", "passport", "layover"}},
	{[]string{"hotel", "inn", "lodging"}, []string{"reservation", "checkin", "lobby", "breakfast", "suite", "concierge"}},
	{[]string{"gym", "fitness", "workout"}, []string{"treadmill", "weights", "trainer", "locker", "cardio", "squats"}},
	{[]string{"garden", "yard", "backyard"}, []string{"tomatoes", "hose", "soil", "compost", "shed", "lawn"}},
	{[]string{"mother", "mum", "mom"}, []string{"recipe", "family", "holidays", "hometown", "knitting", "sunday"}},
	{[]string{"father", "dad", "papa"}, []string{"fishing", "golf", "toolbox", "grill", "football", "pension"}},
	{[]string{"wedding", "marriage", "nuptials"}, []string{"ceremony", "guests", "venue", "rings", "vows", "bridesmaid"}},
	{[]string{"insurance", "insurer", "underwriter"}, []string{"claim", "deductible", "premium", "broker", "accident", "coverage"}},
	{[]string{"bicycle", "bike", "cycle"}, []string{"helmet", "chain", "pedals", "saddle", "gears", "puncture"}},
	{[]string{"dentist", "hygienist", "orthodontist"}, []string{"teeth", "filling", "braces", "cavity", "floss", "crown"}},
	{[]string{"holiday", "vacation", "getaway"}, []string{"beach", "itinerary", "sunscreen", "suitcase", "sightseeing", "resort"}},
	{[]string{"sofa", "couch", "settee"}, []string{"cushions", "upholstery", "livingroom", "armrest", "recliner", "throw"}},
	{[]string{"fridge", "refrigerator", "freezer"}, []string{"groceries", "leftovers", "milk", "vegetables", "icebox", "compressor"}},
	{[]string{"bakery", "baker", "patisserie"}, []string{"bread", "croissant", "sourdough", "pastry", "cake", "oven"}},
	{[]string{"lawyer", "attorney", "solicitor"}, []string{"court", "case", "paperwork", "witness", "hearing", "fees"}},
	{[]string{"piano", "upright", "pianoforte"}, []string{"scales", "sheet", "pedal", "recital", "chords", "metronome"}},
	{[]string{"boyfriend", "partner", "fiance"}, []string{"date", "dinner", "anniversary", "movies", "cuddles", "together"}},
	{[]string{"roof", "rooftop", "shingles"}, []string{"gutter", "leak", "ladder", "tiles", "attic", "chimney"}},
	{[]string{"passport", "visa", "permit"}, []string{"embassy", "photo", "application", "border", "stamp", "consulate"}},
	{[]string{"university", "college", "campus"}, []string{"lecture", "exam", "professor", "semester", "thesis", "tuition"}},
}

var aspects = []concept{
	{[]string{"repair", "fix", "mend"}, []string{"broken", "technician", "parts", "workshop"}},
	{[]string{"cost", "price", "expense"}, []string{"paid", "euros", "bill", "invoice"}},
	{[]string{"password", "passcode", "pin"}, []string{"login", "account", "reset", "security"}},
	{[]string{"address", "location", "whereabouts"}, []string{"street", "city", "postcode", "map"}},
	{[]string{"allergy", "intolerance", "sensitivity"}, []string{"reaction", "sneezing", "rash", "antihistamine"}},
	{[]string{"problem", "issue", "trouble"}, []string{"noticed", "worse", "annoying", "complained"}},
	{[]string{"gift", "present", "surprise"}, []string{"wrapped", "ribbon", "card", "unwrap"}},
	{[]string{"contract", "agreement", "deal"}, []string{"signed", "terms", "clause", "signature"}},
	{[]string{"timetable", "calendar", "agenda"}, []string{"monday", "weekly", "mornings", "evenings"}},
	{[]string{"size", "measurements", "dimensions"}, []string{"centimetres", "width", "height", "tape"}},
	{[]string{"recommendation", "suggestion", "advice"}, []string{"recommended", "try", "opinion", "tip"}},
	{[]string{"deadline", "cutoff", "duedate"}, []string{"overdue", "late", "extension", "urgent"}},
	{[]string{"purchase", "acquisition", "buying"}, []string{"shop", "ordered", "delivered", "receipt"}},
	{[]string{"cancellation", "termination", "withdrawal"}, []string{"refund", "notice", "cancelled", "penalty"}},
	{[]string{"photos", "pictures", "snapshots"}, []string{"camera", "album", "selfie", "printed"}},
	{[]string{"vaccination", "vaccine", "jab"}, []string{"booster", "nurse", "arm", "certificate"}},
	{[]string{"noise", "racket", "din"}, []string{"loud", "earplugs", "night", "sleepless"}},
	{[]string{"smell", "odour", "stench"}, []string{"nose", "air", "window", "spray"}},
	{[]string{"color", "colour", "shade"}, []string{"paint", "blue", "green", "swatch"}},
	{[]string{"warranty", "guarantee", "assurance"}, []string{"expires", "years", "manufacturer", "covered"}},
	{[]string{"delay", "postponement", "holdup"}, []string{"waiting", "rescheduled", "weeks", "slow"}},
	{[]string{"key", "spare", "duplicate"}, []string{"locksmith", "door", "lock", "copy"}},
	{[]string{"review", "evaluation", "assessment"}, []string{"feedback", "rating", "score", "form"}},
	{[]string{"lesson", "class", "tutoring"}, []string{"teacher", "practice", "progress", "homework"}},
}

var people = []string{"Anna", "Berger", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Ruiz", "Kowalski", "Nguyen", "Haddad", "Schmidt", "Costa", "Ivanova", "Murphy", "Sato", "Dubois", "Rossi", "Novak", "Fischer", "Patel"}

var weekdays = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}

// Entry templates: %[1]s topic, %[2]s aspect, %[3]s and %[4]s topic
// context words, %[5]s aspect context word, %[6]s a person, %[7]s a
// detail.
var templates = []string{
	"Sorted out the %[1]s %[2]s with %[6]s today; the %[3]s and the %[4]s came up, and the %[5]s part is settled. Note: %[7]s.",
	"%[6]s called about the %[2]s for the %[1]s. Mentioned the %[3]s, the %[4]s and the %[5]s. Remember %[7]s.",
	"Reminder about the %[1]s %[2]s: %[3]s, %[4]s, %[5]s. %[6]s says %[7]s.",
	"Finally dealt with the %[2]s of the %[1]s. The %[3]s is fine, the %[4]s too, %[5]s still pending; %[7]s according to %[6]s.",
	"Thinking about the %[1]s again, mostly the %[2]s. %[6]s pointed at the %[3]s and the %[4]s; %[5]s. Keep in mind %[7]s.",
}

// entry is one generated passage.
type entry struct {
	topic, aspect int
	path          string
	line          int // the entry's line in path
	text          string
	formT, formA  int
}

// question is one labelled question and the passage that answers it.
type question struct {
	text       string
	path       string
	line       int
	paraphrase bool
}

// corpus is a generated memory: files by workspace path, and questions.
type corpus struct {
	files     map[string]string
	questions []question
	entries   int
}

// genCorpus makes a memory of n entries (about n/3 days of logs plus
// topic notes), labelling nq of them with a question each, a third or
// more of them paraphrases.
func genCorpus(seed uint64, n, nq int) corpus {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	type pair struct{ t, a int }
	var pairs []pair
	for t := range topics {
		for a := range aspects {
			pairs = append(pairs, pair{t, a})
		}
	}
	r.Shuffle(len(pairs), func(i, j int) { pairs[i], pairs[j] = pairs[j], pairs[i] })
	if nq > len(pairs)/2 {
		nq = len(pairs) / 2
	}
	labelled, rest := pairs[:nq], pairs[nq:]
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	detail := func() string {
		switch r.IntN(3) {
		case 0:
			return fmt.Sprintf("%s at %d:%02d", pick(weekdays), 7+r.IntN(12), 15*r.IntN(4))
		case 1:
			return fmt.Sprintf("%d euros", 20+r.IntN(2000))
		default:
			return fmt.Sprintf("reference %c%c-%04d", 'A'+r.IntN(26), 'A'+r.IntN(26), r.IntN(10000))
		}
	}
	mk := func(p pair) entry {
		tc, ac := topics[p.t], aspects[p.a]
		e := entry{topic: p.t, aspect: p.a, formT: r.IntN(len(tc.forms)), formA: r.IntN(len(ac.forms))}
		c1 := r.IntN(len(tc.context))
		c2 := (c1 + 1 + r.IntN(len(tc.context)-1)) % len(tc.context)
		e.text = fmt.Sprintf(pick(templates), tc.forms[e.formT], ac.forms[e.formA], tc.context[c1], tc.context[c2], pick(ac.context), pick(people), detail())
		return e
	}
	entries := make([]entry, 0, n)
	for i := range n {
		if i < nq {
			entries = append(entries, mk(labelled[i]))
		} else {
			entries = append(entries, mk(rest[r.IntN(len(rest))]))
		}
	}
	order := r.Perm(n)
	c := corpus{files: map[string]string{}, entries: n}
	// A tenth of the entries go to topic notes (memory/notes/TOPIC.md,
	// a section per aspect), a few to MEMORY.md, the rest to daily logs
	// of two to four entries under time headings.
	day := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	type file struct {
		b     strings.Builder
		lines int
	}
	files := map[string]*file{}
	add := func(path, s string) int {
		f := files[path]
		if f == nil {
			f = &file{}
			files[path] = f
		}
		line := f.lines + 1
		f.b.WriteString(s)
		f.lines += strings.Count(s, "\n")
		return line
	}
	i := 0
	for i < len(order) {
		e := &entries[order[i]]
		switch {
		case i%10 == 0:
			e.path = "memory/notes/" + topics[e.topic].forms[0] + ".md"
			if files[e.path] == nil {
				add(e.path, "# "+topics[e.topic].forms[0]+"\n\n")
			}
			add(e.path, "## "+fmt.Sprint(i)+"\n\n")
			e.line = add(e.path, e.text+"\n\n")
			i++
		case i%97 == 1:
			e.path = CoreFile
			if files[e.path] == nil {
				add(e.path, "# Long-term memory\n\n")
			}
			e.line = add(e.path, "- "+e.text+"\n")
			i++
		default:
			e.path = "memory/" + day.Format(time.DateOnly) + ".md"
			add(e.path, "# "+day.Format("Monday 2 January 2006")+"\n\n")
			for k := 2 + r.IntN(3); k > 0 && i < len(order); k-- {
				e = &entries[order[i]]
				if i%10 == 0 || i%97 == 1 {
					break
				}
				e.path = "memory/" + day.Format(time.DateOnly) + ".md"
				add(e.path, fmt.Sprintf("## %02d:%02d\n\n", 7+r.IntN(14), r.IntN(60)))
				e.line = add(e.path, e.text+"\n\n")
				i++
			}
			day = day.AddDate(0, 0, 1)
		}
	}
	for p, f := range files {
		c.files[p] = f.b.String()
	}
	// Questions: the labelled entries are entries[:nq].
	asks := []string{"what about the %s %s", "%s %s", "anything on the %s %s", "what did I write about the %s %s", "the %s and its %s"}
	for q := range nq {
		e := entries[q]
		tc, ac := topics[e.topic], aspects[e.aspect]
		para := q%5 < 2 // two in five
		qt := fmt.Sprintf(pick(asks), tc.forms[e.formT], ac.forms[e.formA])
		if para {
			ft := (e.formT + 1 + r.IntN(len(tc.forms)-1)) % len(tc.forms)
			fa := (e.formA + 1 + r.IntN(len(ac.forms)-1)) % len(ac.forms)
			qt = fmt.Sprintf(pick(asks), tc.forms[ft], ac.forms[fa])
		}
		c.questions = append(c.questions, question{text: qt, path: e.path, line: e.line, paraphrase: para})
	}
	sort.Slice(c.questions, func(i, j int) bool { return c.questions[i].text < c.questions[j].text })
	return c
}

// sharesWord reports whether a and b have a content word in common.
func sharesWord(a, b string) bool {
	seen := map[string]bool{}
	for _, w := range Tokenize(a) {
		seen[w] = true
	}
	for _, w := range Tokenize(b) {
		if seen[w] {
			return true
		}
	}
	return false
}
