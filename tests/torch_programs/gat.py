"""A graph attention network (Velickovic et al.) on a Cora-format citation graph, written after pytorch/examples
gat/main.py: multi-head attention over each node's neighbours, scores from `torch.matmul` with a (heads, 2F, 1)
vector and `.mT`, non-edges masked by `torch.where(adj > 0, e, -9e16)`, `torch.empty(size=...)` + xavier_normal_,
ELU between the layers; the features normalised through a sparse diagonal, the adjacency kept dense.

    python gat.py --data ./cora [--epochs 100] [--val-every 20]
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adam


class GraphAttentionLayer(nn.Module):
    """h_i' = sum_j softmax_j(LeakyReLU(a . [W h_i || W h_j])) W h_j over the neighbours j of i, per head."""

    def __init__(self, in_features, out_features, n_heads, concat=False, dropout=0.4, leaky_relu_slope=0.2):
        super(GraphAttentionLayer, self).__init__()
        self.n_heads, self.concat, self.dropout = n_heads, concat, dropout
        if concat:
            assert out_features % n_heads == 0
            self.out_features, self.n_hidden = out_features, out_features // n_heads
        else:
            self.n_hidden = out_features
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))
        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def _get_attention_scores(self, h_transformed):
        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])
        return self.leakyrelu(source_scores + target_scores.mT)   # (heads, n, 1) + (heads, 1, n)

    def forward(self, h, adj_mat):
        n_nodes = h.shape[0]
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
        e = self._get_attention_scores(h_transformed)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask)
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, h_transformed)
        if self.concat:
            return h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        return h_prime.mean(dim=0)


class GAT(nn.Module):
    def __init__(self, in_features, n_hidden, n_heads, num_classes, concat=False, dropout=0.4, leaky_relu_slope=0.2):
        super(GAT, self).__init__()
        self.gat1 = GraphAttentionLayer(in_features, n_hidden, n_heads, concat, dropout, leaky_relu_slope)
        self.gat2 = GraphAttentionLayer(n_hidden, num_classes, 1, False, dropout, leaky_relu_slope)

    def forward(self, input_tensor, adj_mat):
        x = F.elu(self.gat1(input_tensor, adj_mat))
        return F.log_softmax(self.gat2(x, adj_mat), dim=1)


def load_cora(path, device):
    content = np.genfromtxt(os.path.join(path, 'cora.content'), dtype=np.dtype(str))
    cites = np.genfromtxt(os.path.join(path, 'cora.cites'), dtype=np.int32)

    features = torch.FloatTensor(content[:, 1:-1].astype(np.int32))
    scale_vector = torch.sum(features, dim=1)
    scale_vector = 1 / scale_vector
    scale_vector[scale_vector == float('inf')] = 0
    scale_vector = torch.diag(scale_vector).to_sparse()
    features = scale_vector @ features                      # each row normalised to sum 1

    classes, labels = np.unique(content[:, -1], return_inverse=True)
    labels = torch.LongTensor(labels)

    idx = content[:, 0].astype(np.int32)
    idx_map = {node: pos for pos, node in enumerate(idx)}
    edges = np.array([[idx_map[a], idx_map[b]] for a, b in cites], dtype=np.int32)
    V, E = len(idx), edges.shape[0]
    adj_mat = torch.sparse_coo_tensor(edges.T, torch.ones(E), (V, V), dtype=torch.int64)
    adj_mat = torch.eye(V) + adj_mat                        # self-loops

    return features.to(device), labels.to(device), adj_mat.to(device)


def train_iter(epoch, model, optimizer, criterion, inputs, target, mask_train, mask_val, print_every):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()
    output = model(*inputs)
    loss = criterion(output[mask_train], target[mask_train])
    loss.backward()
    optimizer.step()
    loss_train, acc_train = test(model, criterion, inputs, target, mask_train)
    loss_val, acc_val = test(model, criterion, inputs, target, mask_val)
    if epoch % print_every == 0:
        print(f'Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: {loss_train:.4f} '
              f'acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} acc_val: {acc_val:.4f}')


def test(model, criterion, inputs, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*inputs)
        output, target = output[mask], target[mask]
        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='PyTorch Graph Attention Network')
    parser.add_argument('--data', default='./cora')
    parser.add_argument('--epochs', type=int, default=100)
    parser.add_argument('--lr', type=float, default=0.005)
    parser.add_argument('--l2', type=float, default=5e-4)
    parser.add_argument('--dropout-p', type=float, default=0.6)
    parser.add_argument('--hidden-dim', type=int, default=64)
    parser.add_argument('--num-heads', type=int, default=8)
    parser.add_argument('--concat-heads', action='store_true')
    parser.add_argument('--val-every', type=int, default=20)
    parser.add_argument('--no-accel', action='store_true')
    parser.add_argument('--seed', type=int, default=42)
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if use_accel else torch.device('cpu')
    print(f'Using {device} device')

    features, labels, adj_mat = load_cora(args.data, device)
    n = len(labels)
    idx = torch.randperm(n).to(device)
    n_test, n_val = n // 4, n // 4
    idx_test, idx_val, idx_train = idx[:n_test], idx[n_test:n_test + n_val], idx[n_test + n_val:]

    gat_net = GAT(features.shape[1], args.hidden_dim, args.num_heads, labels.max().item() + 1, args.concat_heads,
                  args.dropout_p).to(device)
    optimizer = Adam(gat_net.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()
    for epoch in range(args.epochs):
        train_iter(epoch + 1, gat_net, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val,
                   args.val_every)
    loss_test, acc_test = test(gat_net, criterion, (features, adj_mat), labels, idx_test)
    print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
