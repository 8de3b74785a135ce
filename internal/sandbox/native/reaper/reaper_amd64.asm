# The sandbox's reaper for a direct start, as a static x86-64 Linux
# program of a few instructions (no libc, no Go runtime): PID 1 of the
# sandbox executes it once the command runs. It reads the command's pid
# (8 bytes) from fd 6, reaps every process until the command ends, kills
# all that is left (kill(-1, SIGKILL)), reaps them, and writes a 16-byte
# report to fd 4: the command's wait status, 1 if the command was reaped
# (else 0), flags (1: /tmp has no block left; 2: the file system of fd 7,
# the workspace of a throw-away change set kept in memory, has no block
# or no inode left), and that file system's inodes in use (0 without an
# fd 7), all 32-bit, native order. Anywhere but as PID 1 it reports nothing done (all zero) and
# exits. Built by gen.sh into reaper_amd64.elf (embedded).
	.intel_syntax noprefix
	.globl _start
	.text
_start:
	sub rsp, 256
	mov qword ptr [rsp+16], 0	# report: status, reaped
	mov qword ptr [rsp+24], 0	# report: flags, change set inodes
	mov qword ptr [rsp], 0
	# Only ever as PID 1 of its own PID namespace: kill(-1) below would
	# otherwise reach every process this user may signal.
	mov eax, 39			# getpid
	syscall
	cmp rax, 1
	jne write
	# read(6, rsp, 8): the command's pid
	mov edi, 6
	mov rsi, rsp
	mov edx, 8
	xor eax, eax
	syscall
	cmp rax, 8
	jne report
	mov r12, qword ptr [rsp]
wait:
	# wait4(-1, rsp+8, 0, NULL)
	mov edi, -1
	lea rsi, [rsp+8]
	xor edx, edx
	xor r10d, r10d
	mov eax, 61
	syscall
	cmp rax, -4			# EINTR
	je wait
	test rax, rax
	js report			# ECHILD: nothing left to wait for
	cmp rax, r12
	jne wait
	mov eax, dword ptr [rsp+8]
	mov dword ptr [rsp+16], eax
	mov dword ptr [rsp+20], 1
	# kill(-1, SIGKILL): nothing outlives the command
	mov edi, -1
	mov esi, 9
	mov eax, 62
	syscall
reap:
	mov edi, -1
	xor esi, esi
	xor edx, edx
	xor r10d, r10d
	mov eax, 61
	syscall
	cmp rax, -4
	je reap
	test rax, rax
	jns reap
report:
	# statfs("/tmp", rsp+64): f_bavail is at offset 32
	lea rdi, [rip+tmp]
	lea rsi, [rsp+64]
	mov eax, 137
	syscall
	test rax, rax
	jnz upper
	cmp qword ptr [rsp+96], 0
	jne upper
	mov dword ptr [rsp+24], 1
upper:
	# fstatfs(7, rsp+64): f_bavail at 32, f_files at 40, f_ffree at 48
	mov edi, 7
	lea rsi, [rsp+64]
	mov eax, 138
	syscall
	test rax, rax
	jnz write
	mov rax, qword ptr [rsp+104]
	sub rax, qword ptr [rsp+112]
	mov dword ptr [rsp+28], eax
	cmp qword ptr [rsp+96], 0
	je upperfull
	cmp qword ptr [rsp+112], 0
	jne write
upperfull:
	or dword ptr [rsp+24], 2
write:
	# write(4, rsp+16, 16)
	mov edi, 4
	lea rsi, [rsp+16]
	mov edx, 16
	mov eax, 1
	syscall
	# exit_group(0)
	xor edi, edi
	mov eax, 231
	syscall
	hlt
tmp:
	.asciz "/tmp"
