// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * gpu_standin: character devices registered under the names GPU drivers
 * use, so gpu-trace's field lab can meet real /proc/devices entries, real
 * dynamic majors and opens that succeed, without a GPU.
 *
 *   frontend=nvidia-frontend|nvidia   major 195 (driver 550 renamed it)
 *   uvm=1        nvidia-uvm on a dynamic major
 *   caps=1       nvidia-caps on a dynamic major
 *   kfd=1        kfd (AMD's compute node) on a dynamic major
 *   neighbours=1 the devices next to the GPU under their drivers' names:
 *                infiniband_verbs on the fixed major 231, and
 *                nvidia-caps-imex-channels, gdrdrv and nvidia-fs on
 *                dynamic majors
 *   gpus=N       N GPUs (at most 16) in /proc/driver/nvidia/gpus/<PCI bus id>/information,
 *                as the NVIDIA driver lists them: minors 0..N-1, bus
 *                0000:(18+minor):00.0, UUID GPU-5ca1ab1e-0000-4000-8000-
 *                0000000000NN (NN the minor in hex)
 *   shift=1      hold one dynamic major while the others register, then
 *                let it go: after a reload the dynamic majors have moved
 *                and the old ones belong to no driver, as after a reboot
 *                in which another driver loaded first
 *
 * Every open succeeds and every read returns end of file: an allowed
 * open gives a descriptor as a real driver's would, not ENXIO.
 */
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>

#define FRONTEND_MAJOR 195

static char *frontend = "nvidia-frontend";
module_param(frontend, charp, 0444);
MODULE_PARM_DESC(frontend, "name of major 195 (empty: not registered)");

static bool uvm = true;
module_param(uvm, bool, 0444);
static bool caps;
module_param(caps, bool, 0444);
static bool kfd;
module_param(kfd, bool, 0444);
static bool neighbours;
module_param(neighbours, bool, 0444);
static bool shift;
module_param(shift, bool, 0444);
static unsigned int gpus;
module_param(gpus, uint, 0444);
MODULE_PARM_DESC(gpus, "GPUs listed under /proc/driver/nvidia/gpus");

#define MAX_GPUS 16

static int standin_open(struct inode *inode, struct file *file)
{
	return 0;
}

static ssize_t standin_read(struct file *file, char __user *buf, size_t len,
			    loff_t *pos)
{
	return 0;
}

static const struct file_operations standin_fops = {
	.owner = THIS_MODULE,
	.open = standin_open,
	.read = standin_read,
	.llseek = noop_llseek,
};

/* Registered in this order, released in reverse. */
struct standin {
	const char *name;
	unsigned int fixed_major; /* 0: dynamic */
	bool *wanted;
	const struct file_operations *fops;
	int major;
};

static bool always = true;
static struct standin standins[] = {
	{ "gpu-standin-shift", 0, &shift, &standin_fops }, /* let go at the end */
	{ NULL, FRONTEND_MAJOR, &always, &standin_fops }, /* named by `frontend` */
	{ "nvidia-uvm", 0, &uvm, &standin_fops },
	{ "nvidia-caps", 0, &caps, &standin_fops },
	{ "kfd", 0, &kfd, &standin_fops },
	{ "infiniband_verbs", 231, &neighbours, &standin_fops },
	{ "nvidia-caps-imex-channels", 0, &neighbours, &standin_fops },
	{ "gdrdrv", 0, &neighbours, &standin_fops },
	{ "nvidia-fs", 0, &neighbours, &standin_fops },
	{ "nvidia-nvswitch", 0, &neighbours, &standin_fops },
};

/* The driver's information file, in its format: tabs after the names. */
static int information_show(struct seq_file *m, void *v)
{
	unsigned long minor = (unsigned long)m->private;

	seq_puts(m, "Model: \t\t NVIDIA A100-SXM4-40GB\n");
	seq_puts(m, "IRQ:   \t\t 42\n");
	seq_printf(m, "GPU UUID: \t\t GPU-5ca1ab1e-0000-4000-8000-%012lx\n",
		   minor);
	seq_puts(m, "Video BIOS: \t\t 92.00.45.00.03\n");
	seq_puts(m, "Bus Type: \t\t PCIe\n");
	seq_puts(m, "DMA Size: \t\t 47 bits\n");
	seq_puts(m, "DMA Mask: \t\t 0x7fffffffffff\n");
	seq_printf(m, "Bus Location: \t\t 0000:%02lx:00.0\n", 0x18 + minor);
	seq_printf(m, "Device Minor: \t\t %lu\n", minor);
	seq_puts(m, "GPU Excluded:\t\t No\n");
	return 0;
}

/* Whether driver/nvidia is ours to remove. */
static bool listed;

static int list_gpus(void)
{
	struct proc_dir_entry *dir;
	unsigned long minor;
	char name[48];

	if (!gpus)
		return 0;
	if (gpus > MAX_GPUS)
		return -EINVAL;
	/* Fails where another module (a real driver) has it: not ours. */
	if (!proc_mkdir("driver/nvidia", NULL))
		return -EEXIST;
	listed = true;
	if (!proc_mkdir("driver/nvidia/gpus", NULL))
		goto fail;
	for (minor = 0; minor < gpus; minor++) {
		snprintf(name, sizeof(name), "driver/nvidia/gpus/0000:%02lx:00.0",
			 0x18 + minor);
		dir = proc_mkdir(name, NULL);
		if (!dir || !proc_create_single_data("information", 0444, dir,
						     information_show,
						     (void *)minor))
			goto fail;
	}
	return 0;
fail:
	remove_proc_subtree("driver/nvidia", NULL);
	listed = false;
	return -ENOMEM;
}

static void release_from(int i)
{
	while (--i >= 0) {
		if (standins[i].major > 0)
			unregister_chrdev(standins[i].major, standins[i].name);
		standins[i].major = 0;
	}
}

static int __init standin_init(void)
{
	int i;

	standins[1].name = frontend;
	for (i = 0; i < ARRAY_SIZE(standins); i++) {
		struct standin *s = &standins[i];
		int got;

		if (!*s->wanted || !s->name || !s->name[0])
			continue;
		got = register_chrdev(s->fixed_major, s->name, s->fops);
		if (got < 0) {
			pr_err("gpu_standin: registering %s: %d\n", s->name, got);
			release_from(i);
			return got;
		}
		/* A fixed major returns 0 on success. */
		s->major = s->fixed_major ? s->fixed_major : got;
		pr_info("gpu_standin: %s on major %d\n", s->name, s->major);
	}
	if (standins[0].major > 0) {
		unregister_chrdev(standins[0].major, standins[0].name);
		standins[0].major = 0;
	}
	i = list_gpus();
	if (i < 0) {
		pr_err("gpu_standin: listing GPUs: %d\n", i);
		release_from(ARRAY_SIZE(standins));
	}
	return i;
}

static void __exit standin_exit(void)
{
	if (listed)
		remove_proc_subtree("driver/nvidia", NULL);
	release_from(ARRAY_SIZE(standins));
}

module_init(standin_init);
module_exit(standin_exit);
MODULE_DESCRIPTION("GPU driver stand-in for gpu-trace's field lab");
MODULE_LICENSE("Dual MIT/GPL");
