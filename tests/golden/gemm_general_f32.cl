/*
 * kspec gemm.general, OpenCL C, 32 lanes per work-group.
 * Generated from the kernel's IR; do not edit.
 */
/* Built with -cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt. */
#pragma OPENCL FP_CONTRACT OFF
typedef long ks_i64;
typedef uint ks_u32;
typedef ushort ks_u16;

ks_i64 ksh_imin(ks_i64 a, ks_i64 b)
{
	return a < b ? a : b;
}

/* The canonical tree over 32 lanes: t[l] = t[l] op t[l + s], s = 16 .. 1,
 * computed by every work-item. */
float ksh_reduce_sum_f32(float v, ks_i64 lane, __local float *t)
{
	float u[16];

	t[lane] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	u[0] = t[0] + t[16];
	u[1] = t[1] + t[17];
	u[2] = t[2] + t[18];
	u[3] = t[3] + t[19];
	u[4] = t[4] + t[20];
	u[5] = t[5] + t[21];
	u[6] = t[6] + t[22];
	u[7] = t[7] + t[23];
	u[8] = t[8] + t[24];
	u[9] = t[9] + t[25];
	u[10] = t[10] + t[26];
	u[11] = t[11] + t[27];
	u[12] = t[12] + t[28];
	u[13] = t[13] + t[29];
	u[14] = t[14] + t[30];
	u[15] = t[15] + t[31];
	u[0] = u[0] + u[8];
	u[1] = u[1] + u[9];
	u[2] = u[2] + u[10];
	u[3] = u[3] + u[11];
	u[4] = u[4] + u[12];
	u[5] = u[5] + u[13];
	u[6] = u[6] + u[14];
	u[7] = u[7] + u[15];
	u[0] = u[0] + u[4];
	u[1] = u[1] + u[5];
	u[2] = u[2] + u[6];
	u[3] = u[3] + u[7];
	u[0] = u[0] + u[2];
	u[1] = u[1] + u[3];
	u[0] = u[0] + u[1];
	const float r = u[0];

	barrier(CLK_LOCAL_MEM_FENCE);
	return r;
}

__kernel __attribute__((reqd_work_group_size(32, 1, 1)))
void ks_gemm_general(
	__global const float *restrict p_x,
	__global const float *restrict p_W,
	__global float *p_y,
	ks_i64 p_M,
	ks_i64 p_N,
	ks_i64 p_K)
{
	__local float ks_red_f32[32];
	const ks_i64 ks_lane = (ks_i64)get_local_id(0);
	const ks_i64 ks_group = (ks_i64)get_group_id(0);

	ks_i64 v_nb = ((p_N + 3L) / 4L);
	ks_i64 v_m = (ks_group / v_nb);
	ks_i64 v_n0 = ((ks_group % v_nb) * 4L);
	ks_i64 v_xo = (v_m * p_K);
	ks_i64 v_yo = ((v_m * p_N) + v_n0);
	ks_i64 v_wo0 = (ksh_imin(v_n0, (p_N - 1L)) * p_K);
	ks_i64 v_wo1 = (ksh_imin((v_n0 + 1L), (p_N - 1L)) * p_K);
	ks_i64 v_wo2 = (ksh_imin((v_n0 + 2L), (p_N - 1L)) * p_K);
	ks_i64 v_wo3 = (ksh_imin((v_n0 + 3L), (p_N - 1L)) * p_K);
	float v_acc0 = 0.0f;
	float v_acc1 = 0.0f;
	float v_acc2 = 0.0f;
	float v_acc3 = 0.0f;
	for (ks_i64 v_k0 = 0L; v_k0 < (p_K - (p_K % 32L)); v_k0 += 32L) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_k = (v_k0 + ks_lane);
			float v_xv = (p_x[(v_xo + v_k)]);
			v_acc0 = fma(v_xv, (p_W[(v_wo0 + v_k)]), v_acc0);
			v_acc1 = fma(v_xv, (p_W[(v_wo1 + v_k)]), v_acc1);
			v_acc2 = fma(v_xv, (p_W[(v_wo2 + v_k)]), v_acc2);
			v_acc3 = fma(v_xv, (p_W[(v_wo3 + v_k)]), v_acc3);
		}
	}
	if (((p_K % 32L) != 0L)) {
		/* lanes: this thread is lane ks_lane */
		{
			ks_i64 v_kt = ((p_K - (p_K % 32L)) + ks_lane);
			if ((v_kt < p_K)) {
				float v_xt = (p_x[(v_xo + v_kt)]);
				v_acc0 = fma(v_xt, (p_W[(v_wo0 + v_kt)]), v_acc0);
				v_acc1 = fma(v_xt, (p_W[(v_wo1 + v_kt)]), v_acc1);
				v_acc2 = fma(v_xt, (p_W[(v_wo2 + v_kt)]), v_acc2);
				v_acc3 = fma(v_xt, (p_W[(v_wo3 + v_kt)]), v_acc3);
			}
		}
	}
	const float ks_t0 = ksh_reduce_sum_f32(v_acc0, ks_lane, ks_red_f32);
	if ((v_n0 < p_N)) {
		{
			const ks_i64 ks_t1 = v_yo;
			const float ks_t2 = ks_t0;

			if (ks_lane == 0)
				p_y[ks_t1] = (ks_t2);
		}
	}
	const float ks_t3 = ksh_reduce_sum_f32(v_acc1, ks_lane, ks_red_f32);
	if (((v_n0 + 1L) < p_N)) {
		{
			const ks_i64 ks_t4 = (v_yo + 1L);
			const float ks_t5 = ks_t3;

			if (ks_lane == 0)
				p_y[ks_t4] = (ks_t5);
		}
	}
	const float ks_t6 = ksh_reduce_sum_f32(v_acc2, ks_lane, ks_red_f32);
	if (((v_n0 + 2L) < p_N)) {
		{
			const ks_i64 ks_t7 = (v_yo + 2L);
			const float ks_t8 = ks_t6;

			if (ks_lane == 0)
				p_y[ks_t7] = (ks_t8);
		}
	}
	const float ks_t9 = ksh_reduce_sum_f32(v_acc3, ks_lane, ks_red_f32);
	if (((v_n0 + 3L) < p_N)) {
		{
			const ks_i64 ks_t10 = (v_yo + 3L);
			const float ks_t11 = ks_t9;

			if (ks_lane == 0)
				p_y[ks_t10] = (ks_t11);
		}
	}
}
