/* An open made by io_uring's worker threads rather than by a syscall, for
 * the kernel tests: submits one IORING_OP_OPENAT of argv[1] (read-write),
 * forced to the workers (IOSQE_ASYNC), and exits with the errno of its
 * completion, 0 on success, or 100-105 when the setup itself failed.
 *
 * A worker starts with a copy of the registers of the thread that made it,
 * as they were at that moment. Made by io_uring_enter (one argument), they
 * hold io_uring_enter. With a second argument, a path where it makes a
 * FIFO, the open is linked behind a poll of a pipe that a child writes to
 * 20 ms later, while this thread waits in an openat of the FIFO: the poll's
 * completion interrupts that wait and runs on the way out of the openat,
 * which then restarts and waits for the child to open the FIFO's other end.
 * There the linked open is queued: 6.12 makes a worker for it then, whose
 * copied registers say openat with the FIFO's path; 6.1 issues it inline,
 * in this thread, whose registers say the same after that openat returned.
 * Neither openat is the open that checks the device.
 * Raw syscalls: no liburing needed. Built with -static. */
#include <fcntl.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { OPEN_TAG = 1, POLL_TAG = 2 };

static void *map_ring(int ring, size_t len, off_t offset)
{
	return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, offset);
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3)
		return 100;
	int chained = argc == 3;
	struct io_uring_params params;
	memset(&params, 0, sizeof params);
	int ring = syscall(__NR_io_uring_setup, 2, &params);
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

	int pipe_fds[2];
	unsigned count = 0;
	if (chained) {
		if (pipe(pipe_fds) != 0 || mkfifo(argv[2], 0600) != 0)
			return 104;
		memset(&sqes[count], 0, sizeof sqes[count]);
		sqes[count].opcode = IORING_OP_POLL_ADD;
		sqes[count].flags = IOSQE_IO_LINK;
		sqes[count].fd = pipe_fds[0];
		sqes[count].poll32_events = POLLIN;
		sqes[count].user_data = POLL_TAG;
		count++;
	}
	memset(&sqes[count], 0, sizeof sqes[count]);
	sqes[count].opcode = IORING_OP_OPENAT;
	sqes[count].flags = IOSQE_ASYNC;
	sqes[count].fd = AT_FDCWD;
	sqes[count].addr = (unsigned long)argv[1];
	sqes[count].open_flags = O_RDWR;
	sqes[count].user_data = OPEN_TAG;
	count++;
	unsigned *tail = (unsigned *)(sq + params.sq_off.tail);
	unsigned *array = (unsigned *)(sq + params.sq_off.array);
	for (unsigned i = 0; i < count; i++)
		array[(*tail + i) & (params.sq_entries - 1)] = i;
	__atomic_store_n(tail, *tail + count, __ATOMIC_RELEASE);
	/* Chained: submit now, wait for the completions below. */
	if (syscall(__NR_io_uring_enter, ring, count, 0, 0, NULL, 0) != (int)count)
		return 103;
	if (chained) {
		pid_t child = fork();
		if (child == 0) {
			usleep(20000);
			if (write(pipe_fds[1], "x", 1) != 1)
				_exit(1);
			usleep(50000);
			int fifo = open(argv[2], O_WRONLY);
			_exit(fifo < 0);
		}
		int fifo = open(argv[2], O_RDONLY);
		if (fifo < 0)
			return 104;
		close(fifo);
		waitpid(child, NULL, 0);
	}
	if (syscall(__NR_io_uring_enter, ring, 0, count, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		return 103;

	unsigned *cq_head = (unsigned *)(cq + params.cq_off.head);

	unsigned head = __atomic_load_n(cq_head, __ATOMIC_ACQUIRE);
	unsigned mask = *(unsigned *)(cq + params.cq_off.ring_mask);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + params.cq_off.cqes);
	for (unsigned i = 0; i < count; i++) {
		struct io_uring_cqe *cqe = &cqes[(head + i) & mask];
		if (cqe->user_data != OPEN_TAG)
			continue;
		if (cqe->res >= 0) {
			close(cqe->res);
			return 0;
		}
		return -cqe->res;
	}
	return 105;
}
