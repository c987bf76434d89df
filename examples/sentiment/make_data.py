#!/usr/bin/env python3
"""A small sentiment-style set for examples/sentiment: short made-up reviews
labelled positive or negative, in the shape of the SST-2 prompt -> label
completions of SambaNova's GPT-2 fine-tuning tutorial.

Nothing is downloaded: every review is drawn from the word lists below
(written for this example, part of Trainyard and under its licence) with a
fixed seed, so the files are the same on every machine. A review's label is
the polarity of its opinion word, which sits among random subjects, verbs,
adverbs and endings, so a model has to read the review, not guess from its
length or topic. NEGATION > 0 adds "not" that flips the label: a harder task
than a CI-sized run learns (docs/design-notes.md), so it is off here.

Writes into OUT (default: the current folder):
  reviews.txt   unlabelled reviews, one a line: the pre-training corpus
  train.txt     "review: ... sentiment: <label>" lines, the fine-tuning data
  eval.jsonl    held-out {"prompt": "review: ... sentiment:", "completion":
                " <label>"} lines for `trainyard eval` / `train --eval-data`
Standard library only."""
import json
import os
import random
import sys

SUBJECTS = ["the film", "the movie", "the story", "the acting", "the plot", "the music",
            "the ending", "the cast", "the script", "the director", "this show", "the book"]
LINKS = ["was", "is", "felt", "seemed", "looked"]
ADVERBS = ["", "", "really", "very", "quite", "truly", "so"]
POSITIVE = ["good", "great", "fun", "lovely", "moving", "clever", "brilliant", "warm",
            "charming", "superb"]
NEGATIVE = ["bad", "dull", "boring", "awful", "weak", "messy", "poor", "silly", "flat",
            "tedious"]
NEGATION = 0.0  # share of reviews with "not"; 0: the opinion word alone decides
TAILS = ["", "", "overall", "to me", "from start to end", "in the end"]


def review(rng):
    """One review and its label."""
    positive = rng.random() < 0.6  # an imbalanced set: the majority class is 60 %
    negated = rng.random() < NEGATION
    word = rng.choice(POSITIVE if positive != negated else NEGATIVE)
    words = [rng.choice(SUBJECTS), rng.choice(LINKS)]
    if negated:
        words.append("not")
    words += [rng.choice(ADVERBS), word, rng.choice(TAILS)]
    return " ".join(w for w in words if w), "positive" if positive else "negative"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    rng = random.Random(16)
    seen, train, held = set(), [], []
    while len(train) < 600 or len(held) < 120:
        text, label = review(rng)
        if text in seen:
            continue
        seen.add(text)
        (held if len(held) < 120 and rng.random() < 0.2 else train).append((text, label))
        train = train[:600]
    with open(os.path.join(out, "reviews.txt"), "w") as f:
        f.writelines(text + "\n" for text, _ in train)
    with open(os.path.join(out, "train.txt"), "w") as f:
        f.writelines("review: %s sentiment: %s\n" % (text, label) for text, label in train)
    with open(os.path.join(out, "eval.jsonl"), "w") as f:
        for text, label in held:
            f.write(json.dumps({"prompt": "review: %s sentiment:" % text,
                                "completion": " " + label}) + "\n")
    positives = sum(label == "positive" for _, label in held)
    print("%d training reviews, %d held out (%d positive: majority baseline %.3f)"
          % (len(train), len(held), positives, max(positives, len(held) - positives) / len(held)))


if __name__ == "__main__":
    main()
