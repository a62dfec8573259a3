// rnn_cell.cuh: the pointwise math of one RNN cell for ONE (batch, hidden unit) element, forward and
// backward, for the vanilla RNN, the LSTM and the GRU. Two algorithms share it, so that they cannot
// drift apart:
//   kernels/rnn.cu            the standard algorithm: one fused cell kernel per time step;
//   kernels/rnn_persistent.cu the persistent algorithm: the whole sequence in one launch.
// Gate orders and equations are PyTorch's (see minidl/primitives/rnn.py). "pre" values include both
// biases; "d" is the gradient reaching the cell's output h' (from the next step and from y).
#pragma once

__device__ __forceinline__ float sigmoidf(float a) { return 1.0f / (1.0f + expf(-a)); }

// Is step t inside sequence b? (lengths is nullptr for an unpadded batch)
__device__ __forceinline__ bool step_is_valid(const int* lengths, int b, int t)
{
    return lengths == nullptr || t < lengths[b];
}

__device__ __forceinline__ float bias_at(const float* bias, long long i) { return bias == nullptr ? 0.0f : bias[i]; }

// Vanilla RNN: h' = act(pre), act = tanh (relu == 0) or relu (relu == 1).
__device__ __forceinline__ float rnn_cell_value(float pre, int relu)
{
    return relu ? (pre > 0.0f ? pre : 0.0f) : tanhf(pre);
}

// d act / d pre, written with the output h' = act(pre).
__device__ __forceinline__ float rnn_cell_grad(float d, float h_new, int relu)
{
    return relu ? (h_new > 0.0f ? d : 0.0f) : d * (1.0f - h_new * h_new);
}

// LSTM: act = [i, f, g, o] = sigma, sigma, tanh, sigma of pre; c' = f * c + i * g; h' = o * tanh(c').
__device__ __forceinline__ void lstm_cell_value(const float pre[4], float c_prev, float act[4], float& c_new,
                                                float& h_new)
{
    act[0] = sigmoidf(pre[0]);
    act[1] = sigmoidf(pre[1]);
    act[2] = tanhf(pre[2]);
    act[3] = sigmoidf(pre[3]);
    c_new = act[1] * c_prev + act[0] * act[2];
    h_new = act[3] * tanhf(c_new);
}

// dgate (the gradient of all four pre-activations) from d (into h') and dc (into c', from the next
// step); dc_prev is what reaches c: dc_total * f.
__device__ __forceinline__ void lstm_cell_grad(float d, float dc, const float act[4], float c_prev, float c_new,
                                               float dgate[4], float& dc_prev)
{
    const float tanh_c = tanhf(c_new);
    // c' reaches the loss directly (dc) and through h' = o * tanh(c').
    const float dc_total = dc + d * act[3] * (1.0f - tanh_c * tanh_c);
    dgate[0] = dc_total * act[2] * act[0] * (1.0f - act[0]);
    dgate[1] = dc_total * c_prev * act[1] * (1.0f - act[1]);
    dgate[2] = dc_total * act[0] * (1.0f - act[2] * act[2]);
    dgate[3] = d * tanh_c * act[3] * (1.0f - act[3]);
    dc_prev = dc_total * act[1];
}

// GRU: r = sigma(x_r + h_r), z = sigma(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) * n + z * h,
// where x_* include b_ih and h_* include b_hh. saved = [r, z, n, h_n] (h_n is kept: r multiplies it).
__device__ __forceinline__ float gru_cell_value(float x_r, float x_z, float x_n, float h_r, float h_z, float h_n,
                                                float h_prev, float saved[4])
{
    saved[0] = sigmoidf(x_r + h_r);
    saved[1] = sigmoidf(x_z + h_z);
    saved[2] = tanhf(x_n + saved[0] * h_n);
    saved[3] = h_n;
    return (1.0f - saved[1]) * saved[2] + saved[1] * h_prev;
}

// dgate_x, dgate_h: the gradients of the x and h pre-activations (they differ in the n block, where r
// multiplies h_n). Returns the part of the gradient of h that skips W_hh: d * z.
__device__ __forceinline__ float gru_cell_grad(float d, const float saved[4], float h_prev, float dgate_x[3],
                                               float dgate_h[3])
{
    const float reset = saved[0], update = saved[1], cand = saved[2], hn = saved[3];
    const float dn_pre = d * (1.0f - update) * (1.0f - cand * cand);
    const float dz_pre = d * (h_prev - cand) * update * (1.0f - update);
    const float dr_pre = dn_pre * hn * reset * (1.0f - reset);
    dgate_x[0] = dgate_h[0] = dr_pre;
    dgate_x[1] = dgate_h[1] = dz_pre;
    dgate_x[2] = dn_pre;
    dgate_h[2] = dn_pre * reset;
    return d * update;
}
