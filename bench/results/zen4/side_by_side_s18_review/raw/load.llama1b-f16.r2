 23:07:00 up  2:41,  0 user,  load average: 1.95, 1.94, 1.72
