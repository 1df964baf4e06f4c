/* An open made by io_uring's worker threads rather than by a syscall, for
 * the kernel tests: submits one IORING_OP_OPENAT of argv[1] (read-write),
 * forced to the workers (IOSQE_ASYNC), and exits with the errno of its
 * completion, 0 on success, or 101-103 when io_uring itself failed.
 * Raw syscalls: no liburing needed. Built with -static. */
#include <fcntl.h>
#include <linux/io_uring.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *map_ring(int ring, size_t len, off_t offset)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, offset);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 100;
	struct io_uring_params params;
	memset(&params, 0, sizeof params);
	int ring = syscall(__NR_io_uring_setup, 1, &params);
	if (ring < 0)
		return 101;
	char *sq = map_ring(ring, params.sq_off.array + params.sq_entries * sizeof(unsigned),
			    IORING_OFF_SQ_RING);
	char *cq = map_ring(ring, params.cq_off.cqes + params.cq_entries * sizeof(struct io_uring_cqe),
			    IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes =
		map_ring(ring, params.sq_entries * sizeof(struct io_uring_sqe), IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
		return 102;

	memset(&sqes[0], 0, sizeof sqes[0]);
	sqes[0].opcode = IORING_OP_OPENAT;
	sqes[0].flags = IOSQE_ASYNC;
	sqes[0].fd = AT_FDCWD;
	sqes[0].addr = (unsigned long)argv[1];
	sqes[0].open_flags = O_RDWR;
	unsigned *tail = (unsigned *)(sq + params.sq_off.tail);
	((unsigned *)(sq + params.sq_off.array))[*tail & (params.sq_entries - 1)] = 0;
	__atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return 103;

	unsigned head = __atomic_load_n((unsigned *)(cq + params.cq_off.head), __ATOMIC_ACQUIRE);
	unsigned mask = *(unsigned *)(cq + params.cq_off.ring_mask);
	int res = ((struct io_uring_cqe *)(cq + params.cq_off.cqes))[head & mask].res;
	if (res >= 0) {
		close(res);
		return 0;
	}
	return -res;
}
