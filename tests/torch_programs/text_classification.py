# Follows PyTorch's "Text classification with the torchtext library" tutorial (beginner_source/
# text_sentiment_ngrams_tutorial.py, BSD-3-Clause): a bag of word ids per sentence through nn.EmbeddingBag
# with offsets, a linear classifier, SGD with StepLR and gradient clipping, collate_fn building the offsets.
# torchtext is not used (it is deprecated): the vocabulary and a small AG_NEWS-like corpus are built here.
import time

import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.dataset import random_split

torch.manual_seed(0)
TOPICS = {0: "world", 1: "sports", 2: "business", 3: "science"}
WORDS = {0: "election war minister talks treaty border".split(), 1: "match goal team coach season league".split(),
         2: "market shares profit bank stocks merger".split(), 3: "nasa space research study genome robot".split()}
FILLER = "the a of in on says new report after week".split()
g = torch.Generator().manual_seed(1)


def sentence(label):
    n = int(torch.randint(5, 12, (1,), generator=g))
    words = []
    for _ in range(n):
        pool = WORDS[label] if float(torch.rand(1, generator=g)) < 0.5 else FILLER
        words.append(pool[int(torch.randint(0, len(pool), (1,), generator=g))])
    return " ".join(words)


train_iter = [(int(torch.randint(0, 4, (1,), generator=g)),) for _ in range(1200)]
train_iter = [(label, sentence(label)) for (label,) in train_iter]
test_iter = [(label, sentence(label)) for label in [int(torch.randint(0, 4, (1,), generator=g)) for _ in range(400)]]

vocab = {"<unk>": 0}
for _, text in train_iter:
    for tok in text.split():
        vocab.setdefault(tok, len(vocab))


def text_pipeline(x):
    return [vocab.get(tok, 0) for tok in x.split()]


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(_label)
        processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


model = TextClassificationModel(len(vocab), 64, len(TOPICS))
EPOCHS, LR, BATCH_SIZE = 4, 5, 64
criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)


def train(dataloader):
    model.train()
    total_acc, total_count = 0, 0
    for idx, (label, text, offsets) in enumerate(dataloader):
        optimizer.zero_grad()
        predicted_label = model(text, offsets)
        loss = criterion(predicted_label, label)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        total_acc += (predicted_label.argmax(1) == label).sum().item()
        total_count += label.size(0)
    return total_acc / total_count


def evaluate(dataloader):
    model.eval()
    total_acc, total_count = 0, 0
    with torch.no_grad():
        for idx, (label, text, offsets) in enumerate(dataloader):
            predicted_label = model(text, offsets)
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
    return total_acc / total_count


num_train = int(len(train_iter) * 0.95)
split_train_, split_valid_ = random_split(train_iter, [num_train, len(train_iter) - num_train])
train_dataloader = DataLoader(split_train_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch)
valid_dataloader = DataLoader(split_valid_, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch)
test_dataloader = DataLoader(test_iter, batch_size=BATCH_SIZE, shuffle=True, collate_fn=collate_batch)
total_accu = None
for epoch in range(1, EPOCHS + 1):
    epoch_start_time = time.time()
    train_acc = train(train_dataloader)
    accu_val = evaluate(valid_dataloader)
    if total_accu is not None and total_accu > accu_val:
        scheduler.step()
    else:
        total_accu = accu_val
    print(f"| end of epoch {epoch:3d} | time: {time.time() - epoch_start_time:5.2f}s | train accuracy {train_acc:8.3f} "
          f"| valid accuracy {accu_val:8.3f} ")
accu_test = evaluate(test_dataloader)
print(f"test accuracy {accu_test:8.3f}")
ex_text_str = "the team won the match after a late goal in the league"
with torch.no_grad():
    text = torch.tensor(text_pipeline(ex_text_str))
    print("This is a %s news" % TOPICS[model(text, torch.tensor([0])).argmax(1).item()])
